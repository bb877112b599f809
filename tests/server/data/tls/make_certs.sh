#!/usr/bin/env bash
# Regenerates the test-only TLS material of tls_test.cc: a CA, a server certificate for
# localhost / 127.0.0.1 and a client certificate, all signed by the CA, valid for 100 years.
# These keys protect nothing; never use them outside tests.
set -euo pipefail
cd "$(dirname "$0")"
days=36500
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days $days \
  -subj "/CN=mlaserve test CA" 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr \
    -subj "/CN=mlaserve test $who" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=%s\n' \
    "$([ $who = server ] && echo serverAuth || echo clientAuth)" > $who.ext
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem \
    -days $days -extfile $who.ext 2>/dev/null
  rm $who.csr $who.ext
done
rm -f ca.key ca.srl
