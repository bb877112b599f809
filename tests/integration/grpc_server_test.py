#!/usr/bin/env python3
"""Out-of-process test of `mlaserve serve`: starts the real binary on a tiny model on a loopback
port and drives it with a Python grpcio client: every RPC, every status code, 128 concurrent
streams, Abort, client cancel, a deadline, health and reflection, then the SIGTERM drain.

Usage: grpc_server_test.py --mlaserve=BIN --protoc=PROTOC --source_dir=DIR
Needs python3-grpcio and python3-protobuf (scripts/bootstrap.sh installs them).
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import grpc
except ImportError:
    sys.exit("grpc_server_test: the Python module `grpc` is missing; install python3-grpcio "
             "(scripts/bootstrap.sh) and run with the system python3")

ARGS = None
pb = None       # mlaserve.v1 messages
health = None   # grpc.health.v1 messages

INFERENCE = "/mlaserve.v1.Inference/"
MAX_NUM_SEQS = 8
MAX_QUEUE = 128
CONTEXT = 4096  # the tiny model's max_position_embeddings
# The tiny model decodes a request this long in about half a second alone: long enough to be
# aborted, cancelled or past a short deadline mid-stream. The drain test queues many of them.
LONG = 4000
# The drain the server is given: long enough for the checks made during it on a loaded host (at
# 2 s a busy CI host saw the server gone before its second request), short against the drain
# test's work (12 waves of MAX_NUM_SEQS streams of LONG tokens, 48,000 steps).
DRAIN_S = 10


def generate_messages(workdir):
    """Compiles the protos into Python message modules (no service stubs needed)."""
    global pb, health
    out = os.path.join(workdir, "py")
    # The health proto is copied under another directory so that its module does not shadow
    # the `grpc` package.
    proto_dir = os.path.join(workdir, "protos")
    os.makedirs(os.path.join(proto_dir, "health_v1"))
    os.makedirs(out)
    shutil.copy(os.path.join(ARGS.source_dir, "proto/grpc/health/v1/health.proto"),
                os.path.join(proto_dir, "health_v1/health.proto"))
    subprocess.run([ARGS.protoc, "--proto_path=" + os.path.join(ARGS.source_dir, "proto"),
                    "--proto_path=" + proto_dir, "--python_out=" + out,
                    "mlaserve/v1/inference.proto", "health_v1/health.proto"], check=True)
    sys.path.insert(0, out)
    from mlaserve.v1 import inference_pb2
    from health_v1 import health_pb2
    pb, health = inference_pb2, health_pb2


def make_model_dir(workdir):
    """The tiny checkpoint plus a byte-level tokenizer, so text prompts work too."""
    model = os.path.join(workdir, "model")
    os.makedirs(model)
    source = os.path.join(ARGS.source_dir, "tests/data/models/v2_lite_dense_first")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(source, name), model)
    tokenizer = os.path.join(ARGS.source_dir, "tests/server/data/tiny_tokenizer")
    for name in os.listdir(tokenizer):
        shutil.copy(os.path.join(tokenizer, name), model)
    return model


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, channel):
        def unary(name, response):
            return channel.unary_unary(INFERENCE + name,
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=response.FromString)
        self.generate = channel.unary_stream(
            INFERENCE + "Generate", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.GenerateResponse.FromString)
        self.abort = unary("Abort", pb.AbortResponse)
        self.tokenize = unary("Tokenize", pb.TokenizeResponse)
        self.detokenize = unary("Detokenize", pb.DetokenizeResponse)
        self.model_info = unary("GetModelInfo", pb.GetModelInfoResponse)
        self.server_info = unary("GetServerInfo", pb.GetServerInfoResponse)
        self.check = channel.unary_unary(
            "/grpc.health.v1.Health/Check", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=health.HealthCheckResponse.FromString)
        self.watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=health.HealthCheckResponse.FromString)
        self.reflection = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")


def greedy(prompt, max_tokens, **kwargs):
    return pb.GenerateRequest(token_ids=pb.TokenIds(ids=prompt),
                              sampling=pb.SamplingParams(temperature=0.0),
                              stopping=pb.StoppingCriteria(max_tokens=max_tokens, ignore_eos=True),
                              **kwargs)


def collect(responses):
    """(token ids, text, the Complete) of a finished stream."""
    ids, text, complete = [], "", None
    for r in responses:
        if r.HasField("chunk"):
            ids.extend(r.chunk.token_ids)
            text += r.chunk.text
        else:
            complete = r.complete
    return ids, text, complete


class MlaserveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="mlaserve_it_")
        generate_messages(cls.workdir)
        model = make_model_dir(cls.workdir)
        cls.port = free_port()
        cls.log = open(os.path.join(cls.workdir, "server.log"), "w+")
        cls.server = subprocess.Popen(
            [ARGS.mlaserve, "serve", "--model=" + model, "--host=127.0.0.1", "--http_port=0",
             "--port=%d" % cls.port, "--backend=cpu", "--threads=2",
             "--max_num_seqs=%d" % MAX_NUM_SEQS, "--max_num_batched_tokens=256",
             "--block_size=16", "--kv_cache_tokens=65536",
             "--max_queue=%d" % MAX_QUEUE, "--drain_timeout_s=%d" % DRAIN_S, "--log_format=json",
             "--metrics_port=0"],
            stderr=cls.log)
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % cls.port)
        cls.client = Client(cls.channel)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if cls.client.check(health.HealthCheckRequest(), timeout=2).status == \
                        health.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if cls.server.poll() is not None:
                break
            time.sleep(0.1)
        cls.tearDownClass()
        raise RuntimeError("mlaserve did not become SERVING; log:\n" + cls.server_log())

    @classmethod
    def tearDownClass(cls):
        if cls.server.poll() is None:
            cls.server.kill()
            cls.server.wait()
        cls.channel.close()
        cls.log.close()
        shutil.rmtree(cls.workdir, ignore_errors=True)

    @classmethod
    def server_log(cls):
        cls.log.flush()
        cls.log.seek(0)
        return cls.log.read()

    def assert_code(self, code, call, field=None):
        with self.assertRaises(grpc.RpcError) as caught:
            call()
        self.assertEqual(caught.exception.code(), code, caught.exception.details())
        if field is not None:
            self.assertIn(field, caught.exception.details())

    def assert_idle_without_leak(self):
        deadline = time.time() + 10
        while True:
            info = self.client.server_info(pb.GetServerInfoRequest())
            if (info.num_running == 0 and info.num_waiting == 0
                    and info.kv_blocks_free == info.kv_blocks_total):
                return
            if time.time() > deadline:
                self.fail("engine not idle or KV blocks leaked: %s" % info)
            time.sleep(0.02)

    def test_01_model_and_server_info(self):
        model = self.client.model_info(pb.GetModelInfoRequest())
        self.assertEqual(model.vocab_size, 256)
        self.assertEqual(model.max_context_length, CONTEXT)
        self.assertEqual(list(model.eos_token_ids), [255])
        self.assertEqual(model.architecture, "DeepseekV2ForCausalLM")
        info = self.client.server_info(pb.GetServerInfoRequest())
        self.assertEqual(info.backend, "cpu")
        self.assertEqual(list(info.graph_batch_sizes), [1, 2, 4, MAX_NUM_SEQS])
        self.assertEqual(info.kv_block_size, 16)
        self.assertEqual(info.kv_blocks_total, 65536 // 16)
        self.assertFalse(info.draining)

    def test_02_health_and_reflection(self):
        for service in ("", "mlaserve.v1.Inference"):
            self.assertEqual(self.client.check(health.HealthCheckRequest(service=service)).status,
                             health.HealthCheckResponse.SERVING)
        self.assert_code(grpc.StatusCode.NOT_FOUND,
                         lambda: self.client.check(health.HealthCheckRequest(service="nope")))
        # ServerReflectionRequest{list_services: ""}, written by hand: field 7, length 0.
        answers = self.client.reflection(iter([b"\x3a\x00"]), timeout=10)
        self.assertIn(b"mlaserve.v1.Inference", next(answers))
        answers.cancel()

    def test_03_tokenize_detokenize(self):
        ids = self.client.tokenize(pb.TokenizeRequest(text="hey", add_special_tokens=True)).ids
        self.assertEqual(len(ids), 4)
        self.assertEqual(ids[0], 254)
        text = self.client.detokenize(pb.DetokenizeRequest(ids=ids, skip_special_tokens=True))
        self.assertEqual(text.text, "hey")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.client.detokenize(pb.DetokenizeRequest(ids=[1, 300])),
                         "ids[1]")

    def test_04_generate_greedy_text_and_logprobs(self):
        request = greedy([3, 1, 4, 1, 5], 16, top_logprobs=2)
        a = list(self.client.generate(request))
        b = list(self.client.generate(request))
        ids_a, _, complete = collect(a)
        self.assertEqual(ids_a, collect(b)[0])
        self.assertEqual(len(ids_a), 16)
        self.assertEqual(complete.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(complete.completion_tokens, 16)
        self.assertEqual(complete.prompt_tokens, 5)
        self.assertTrue(a[0].request_id)
        self.assertEqual(a[-1].request_id, a[0].request_id)
        logprobs = [lp for r in a if r.HasField("chunk") for lp in r.chunk.logprobs]
        self.assertEqual([lp.token_id for lp in logprobs], ids_a)
        self.assertTrue(all(len(lp.top) == 2 for lp in logprobs))
        text_request = pb.GenerateRequest(text="abc", stopping=pb.StoppingCriteria(max_tokens=5))
        _, _, complete = collect(self.client.generate(text_request))
        self.assertEqual(complete.prompt_tokens, 4)  # <bos> a b c

    def test_05_invalid_arguments_name_the_field(self):
        cases = [
            (pb.GenerateRequest(), "prompt"),
            (pb.GenerateRequest(token_ids=pb.TokenIds()), "token_ids"),
            (greedy([1, 256], 4), "token_ids[1]"),
            (greedy([1] * CONTEXT, 4), "token_ids"),
            (greedy([1], 0), "max_tokens"),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1]),
                                sampling=pb.SamplingParams(top_p=1.5)), "top_p"),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1]),
                                sampling=pb.SamplingParams(temperature=float("nan"))),
             "temperature"),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1]), top_logprobs=21), "top_logprobs"),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1]),
                                stopping=pb.StoppingCriteria(stop=[""])), "stop[0]"),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1]),
                                stopping=pb.StoppingCriteria(min_tokens=CONTEXT)), "min_tokens"),
        ]
        for request, field in cases:
            self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                             lambda: list(self.client.generate(request)), field)

    def test_06_concurrent_streams(self):
        results = [None] * 128

        def run(i):
            results[i] = collect(self.client.generate(greedy([i, 2, 3], 10 + i % 7)))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (ids, _, complete) in enumerate(results):
            self.assertEqual(len(ids), 10 + i % 7)
            self.assertEqual(complete.completion_tokens, len(ids))
        self.assert_idle_without_leak()

    def test_07_abort_rpc(self):
        stream = self.client.generate(greedy([7, 7], LONG, request_id="to-abort"))
        first = next(stream)
        aborted = self.client.abort(pb.AbortRequest(request_ids=["to-abort", "unknown"]))
        self.assertEqual(list(aborted.aborted), ["to-abort"])
        ids, _, complete = collect(stream)
        self.assertEqual(complete.finish_reason, pb.FINISH_REASON_ABORT)
        self.assertEqual(complete.completion_tokens, len(first.chunk.token_ids) + len(ids))
        self.assert_idle_without_leak()

    def test_08_duplicate_id_cancel_and_deadline_free_kv(self):
        stream = self.client.generate(greedy([8, 8], LONG, request_id="dup"))
        next(stream)
        self.assert_code(grpc.StatusCode.ALREADY_EXISTS,
                         lambda: list(self.client.generate(greedy([1], 4, request_id="dup"))),
                         "request_id")
        stream.cancel()
        self.assert_code(grpc.StatusCode.CANCELLED, lambda: list(stream))
        self.assert_code(grpc.StatusCode.DEADLINE_EXCEEDED,
                         lambda: list(self.client.generate(greedy([9], LONG), timeout=0.05)))
        self.assert_idle_without_leak()

    def test_09_full_queue_is_resource_exhausted(self):
        streams = [self.client.generate(greedy([i, 1], LONG))
                   for i in range(MAX_NUM_SEQS + MAX_QUEUE + 16)]
        deadline = time.time() + 30
        refused = []
        while not refused and time.time() < deadline:
            refused = [s for s in streams
                       if s.done() and s.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
            time.sleep(0.05)
        for s in streams:
            s.cancel()
        self.assertTrue(refused, "no call was refused with RESOURCE_EXHAUSTED")
        self.assertIn("queue", refused[0].details())
        codes = {s.code() for s in streams}
        self.assertLessEqual(codes, {grpc.StatusCode.RESOURCE_EXHAUSTED,
                                     grpc.StatusCode.CANCELLED})
        self.assert_idle_without_leak()

    def test_99_sigterm_drains_and_exits_zero(self):
        watch = self.client.watch(health.HealthCheckRequest(service="mlaserve.v1.Inference"))
        self.assertEqual(next(watch).status, health.HealthCheckResponse.SERVING)
        # More work than the drain allows (running and queued), however fast the host.
        streams = [self.client.generate(greedy([i, 5], LONG)) for i in range(12 * MAX_NUM_SEQS)]
        next(streams[0])
        deadline = time.time() + 30
        while time.time() < deadline:
            info = self.client.server_info(pb.GetServerInfoRequest())
            if info.num_running + info.num_waiting == len(streams):
                break
            time.sleep(0.01)
        self.server.send_signal(signal.SIGTERM)
        self.assertEqual(next(watch).status, health.HealthCheckResponse.NOT_SERVING)
        self.assertTrue(self.client.server_info(pb.GetServerInfoRequest()).draining)
        self.client.model_info(pb.GetModelInfoRequest())
        self.assert_code(grpc.StatusCode.UNAVAILABLE,
                         lambda: list(self.client.generate(greedy([1], 4))), "draining")
        # Every stream ends with a Complete: finished within the drain, or aborted at its end.
        reasons = [collect(s)[2].finish_reason for s in streams]
        self.assertLessEqual(set(reasons), {pb.FINISH_REASON_LENGTH, pb.FINISH_REASON_ABORT})
        self.assertIn(pb.FINISH_REASON_ABORT, reasons)
        self.assertEqual(self.server.wait(timeout=30), 0)
        log = self.server_log()
        for event in ('"event":"drain_started"', '"event":"drain_finished"'):
            self.assertIn(event, log)


def run_tests(module_globals, add_flags=None, check=None):
    """The `main` of every integration test module: parses --mlaserve, --protoc, --source_dir
    (and what `add_flags(parser)` adds), sets ARGS here and in the calling module, runs
    `check(args)` if given, then the module's unittest cases (other arguments go to unittest)."""
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--mlaserve", required=True)
    parser.add_argument("--protoc", required=True)
    parser.add_argument("--source_dir", required=True)
    if add_flags is not None:
        add_flags(parser)
    ARGS, rest = parser.parse_known_args()
    module_globals["ARGS"] = ARGS
    if check is not None:
        check(ARGS)
    unittest.main(module=module_globals["__name__"], argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    run_tests(globals())
