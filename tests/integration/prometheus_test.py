#!/usr/bin/env python3
"""Metrics scraped by a real Prometheus: starts `mlaserve serve` on the tiny model and a
Prometheus server (its own config and storage, 1 s scrape interval) on loopback ports, drives
load with a Python grpcio client, then asks Prometheus's HTTP API that the target is up, that
mlaserve_generation_tokens_total equals the tokens the client received, and that a TTFT
quantile computes.

Usage: prometheus_test.py --mlaserve=BIN --protoc=PROTOC --source_dir=DIR [--prometheus=BIN]
Needs python3-grpcio, python3-protobuf and prometheus (scripts/bootstrap.sh installs them).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_server_test as common  # noqa: E402  (protos, the model dir, the client)

ARGS = None


def wait_until(condition, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="mlaserve_prom_")
        cls.processes = []
        common.generate_messages(cls.workdir)
        model = common.make_model_dir(cls.workdir)
        grpc_port, metrics_port, cls.prom_port = (common.free_port() for _ in range(3))
        cls.start("mlaserve", [
            ARGS.mlaserve, "serve", "--model=" + model, "--host=127.0.0.1", "--http_port=0",
            "--port=%d" % grpc_port, "--metrics_host=127.0.0.1",
            "--metrics_port=%d" % metrics_port, "--backend=cpu", "--threads=2",
            "--max_num_seqs=8", "--block_size=16", "--kv_cache_tokens=65536"])
        config = os.path.join(cls.workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: mlaserve\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % metrics_port)
        cls.start("prometheus", [
            ARGS.prometheus, "--config.file=" + config,
            "--storage.tsdb.path=" + os.path.join(cls.workdir, "tsdb"),
            "--web.listen-address=127.0.0.1:%d" % cls.prom_port])
        cls.channel = common.grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
        cls.client = common.Client(cls.channel)

        def serving():
            try:
                return cls.client.check(common.health.HealthCheckRequest(), timeout=2).status == \
                    common.health.HealthCheckResponse.SERVING
            except common.grpc.RpcError:
                return False
        try:
            wait_until(serving, 120, "mlaserve to serve")
        except AssertionError:
            print(cls.logs(), file=sys.stderr)
            cls.tearDownClass()
            raise

    @classmethod
    def start(cls, name, argv):
        log = open(os.path.join(cls.workdir, name + ".log"), "w+")
        cls.processes.append((name, subprocess.Popen(argv, stdout=log, stderr=log), log))

    @classmethod
    def tearDownClass(cls):
        for name, process, log in cls.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            log.close()
        cls.channel.close()
        shutil.rmtree(cls.workdir, ignore_errors=True)

    @classmethod
    def logs(cls):
        text = ""
        for name, _, log in cls.processes:
            log.flush()
            log.seek(0)
            text += "--- %s ---\n%s\n" % (name, log.read()[-4000:])
        return text

    def query(self, promql):
        """The instant vector of `promql` as [(labels, float value)]; [] while Prometheus is
        not ready."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            self.prom_port, urllib.parse.urlencode({"query": promql}))
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except OSError:
            return []
        self.assertEqual(body["status"], "success", body)
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def value(self, promql):
        result = self.query(promql)
        return result[0][1] if len(result) == 1 else None

    def test_prometheus_scrapes_exact_counts(self):
        try:
            # A scrape before the load, so that rate() sees the counters rise.
            wait_until(lambda: self.value('up{job="mlaserve"}') == 1, 60, "the first scrape")
            received = [0] * 16

            def run(i):
                responses = self.client.generate(
                    common.greedy([1 + i, 2 + i, 3 + i], 4 + i % 5), timeout=60)
                received[i] = len(common.collect(responses)[0])
            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(received))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            total = sum(received)
            self.assertGreater(total, 0)
            wait_until(lambda: self.value("mlaserve_generation_tokens_total") == total, 30,
                       "a scrape after the load")
            self.assertEqual(self.value('up{job="mlaserve"}'), 1)
            self.assertEqual(self.value(
                'mlaserve_request_success_total{finished_reason="length"}'), len(received))
            self.assertEqual(self.value("mlaserve_num_requests_running"), 0)
            quantile = self.value(
                "histogram_quantile(0.9, rate(mlaserve_time_to_first_token_seconds_bucket[1m]))")
            self.assertIsNotNone(quantile)
            self.assertTrue(math.isfinite(quantile) and quantile > 0, quantile)
        except AssertionError:
            print(self.logs(), file=sys.stderr)
            raise


def check_prometheus(args):
    if not os.access(args.prometheus, os.X_OK):
        sys.exit("prometheus_test: %s is missing; install the prometheus package "
                 "(scripts/bootstrap.sh)" % args.prometheus)


if __name__ == "__main__":
    common.run_tests(
        globals(),
        add_flags=lambda p: p.add_argument("--prometheus", default="/usr/bin/prometheus"),
        check=check_prometheus)
