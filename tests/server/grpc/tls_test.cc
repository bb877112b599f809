// TLS and mutual TLS on the gRPC port, with the test-only certificates of tests/server/data/tls
// (make_certs.sh), and the flag errors of bad TLS settings.
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace mlaserve::testing {
namespace {

using ::testing::HasSubstr;

std::string TlsFile(const std::string& name) {
  const char* source = std::getenv("MLASERVE_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/tests/server/data/tls/" + name;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

InferenceServerOptions TlsOptions(bool mutual) {
  InferenceServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.tls_cert_file = TlsFile("server.pem");
  options.tls_key_file = TlsFile("server.key");
  if (mutual) options.tls_client_ca_file = TlsFile("ca.pem");
  return options;
}

// A health Check over `credentials`: the call's status code.
grpc::StatusCode CheckOver(int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), credentials, args);
  return HealthCheck(*grpc::health::v1::Health::NewStub(channel), "").code;
}

grpc::SslCredentialsOptions TrustingTheTestCa() {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = Read(TlsFile("ca.pem"));
  return options;
}

TEST(TlsTest, ServesTlsClientsOnly) {
  auto server = InferenceServer::Start(TlsOptions(/*mutual=*/false));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_EQ(CheckOver(port, grpc::SslCredentials(TrustingTheTestCa())), grpc::StatusCode::OK);
  EXPECT_EQ(CheckOver(port, grpc::InsecureChannelCredentials()), grpc::StatusCode::UNAVAILABLE);
}

TEST(TlsTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  auto server = InferenceServer::Start(TlsOptions(/*mutual=*/true));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_EQ(CheckOver(port, grpc::SslCredentials(TrustingTheTestCa())),
            grpc::StatusCode::UNAVAILABLE);
  grpc::SslCredentialsOptions with_client_cert = TrustingTheTestCa();
  with_client_cert.pem_cert_chain = Read(TlsFile("client.pem"));
  with_client_cert.pem_private_key = Read(TlsFile("client.key"));
  EXPECT_EQ(CheckOver(port, grpc::SslCredentials(with_client_cert)), grpc::StatusCode::OK);
}

TEST(TlsTest, BadSettingsNameTheFlag) {
  InferenceServerOptions no_key = TlsOptions(false);
  no_key.tls_key_file.clear();
  EXPECT_THAT(std::string(InferenceServer::Start(no_key).status().message()),
              HasSubstr("--tls_key"));
  InferenceServerOptions ca_only;
  ca_only.host = "127.0.0.1";
  ca_only.port = 0;
  ca_only.tls_client_ca_file = TlsFile("ca.pem");
  EXPECT_THAT(std::string(InferenceServer::Start(ca_only).status().message()),
              HasSubstr("--tls_client_ca"));
  InferenceServerOptions missing = TlsOptions(false);
  missing.tls_cert_file = TlsFile("no_such.pem");
  const absl::Status status = InferenceServer::Start(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--tls_cert"));
}

TEST(ListenAddressTest, BracketsIpv6AndWidensTheWildcard) {
  EXPECT_EQ(ListenAddress("127.0.0.1", 5), "127.0.0.1:5");
  EXPECT_EQ(ListenAddress("::1", 5), "[::1]:5");
  EXPECT_EQ(ListenAddress("[::1]", 5), "[::1]:5");
  EXPECT_EQ(ListenAddress("localhost", 5), "localhost:5");
  const std::string any = ListenAddress("0.0.0.0", 5);
  EXPECT_TRUE(any == "[::]:5" || any == "0.0.0.0:5") << any;
}

TEST(InferenceServerTest, SecondServerOnATakenPortFails) {
  std::unique_ptr<TestServer> first = StartTestServer(nullptr);
  ASSERT_NE(first, nullptr);
  InferenceServerOptions options;
  options.host = "127.0.0.1";
  options.port = first->server->port();
  const absl::Status status = InferenceServer::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--port"));
}

}  // namespace
}  // namespace mlaserve::testing
