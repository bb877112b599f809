#!/usr/bin/env python3
"""The embedded default model, end to end: `mlaserve serve` with no --model serves it, and a
text prompt sent through the gRPC API streams the same tokens and the same text as
`mlaserve generate` prints for that prompt -- greedy, and sampled with a seed.

Usage: default_model_test.py --mlaserve=BIN --protoc=PROTOC --source_dir=DIR
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import shutil
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_server_test as common  # noqa: E402  (protos, the client)

grpc = common.grpc
ARGS = None

PROMPTS = ["A fool and his money", "The meaning of life is", "Q: Why did the chicken cross"]


def generate(prompt, max_tokens, temperature, seed):
    """Token ids and text of `mlaserve generate` (default model, same engine flags)."""
    common_flags = ["--prompt=" + prompt, "--max_tokens=%d" % max_tokens,
                    "--temperature=%g" % temperature, "--seed=%d" % seed, "--threads=2"]
    lines = subprocess.run([ARGS.mlaserve, "generate", "--output=json"] + common_flags,
                           check=True, capture_output=True, text=True).stdout.splitlines()
    ids = [json.loads(line)["id"] for line in lines[:-1]]
    text = subprocess.run([ARGS.mlaserve, "generate", "--output=text"] + common_flags,
                          check=True, capture_output=True, text=True).stdout
    # generate prints the completion and ends the line.
    return ids, text[:-1] if text.endswith("\n") else text


class DefaultModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="mlaserve_default_")
        common.generate_messages(cls.workdir)
        port = common.free_port()
        cls.log = open(os.path.join(cls.workdir, "mlaserve.log"), "w+")
        cls.server = subprocess.Popen(
            [ARGS.mlaserve, "serve", "--host=127.0.0.1", "--port=%d" % port, "--http_port=0", "--threads=2",
             "--metrics_port=0"], stderr=cls.log)
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        cls.client = common.Client(cls.channel)
        grpc.channel_ready_future(cls.channel).result(timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(signal.SIGTERM)
        cls.server.wait(timeout=30)
        cls.channel.close()
        cls.log.close()
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def stream(self, prompt, max_tokens, temperature, seed):
        request = common.pb.GenerateRequest(
            text=prompt, sampling=common.pb.SamplingParams(temperature=temperature, seed=seed),
            stopping=common.pb.StoppingCriteria(max_tokens=max_tokens))
        ids, text, complete = common.collect(
            self.client.generate(request, timeout=60, wait_for_ready=True))
        self.assertIsNotNone(complete)
        return ids, text

    def test_serves_the_default_model(self):
        model = self.client.model_info(common.pb.GetModelInfoRequest(), wait_for_ready=True)
        self.assertEqual(model.model_name, "mlaserve-tiny-moe")
        self.assertEqual(model.vocab_size, 4096)

    def test_grpc_streams_what_generate_prints(self):
        for prompt in PROMPTS:
            for temperature, seed in ((0.0, 0), (0.8, 7), (0.8, 12345)):
                with self.subTest(prompt=prompt, temperature=temperature, seed=seed):
                    want_ids, want_text = generate(prompt, 24, temperature, seed)
                    got_ids, got_text = self.stream(prompt, 24, temperature, seed)
                    self.assertGreater(len(want_ids), 0)
                    self.assertEqual(got_ids, want_ids)
                    self.assertEqual(got_text, want_text)


if __name__ == "__main__":
    common.run_tests(globals())
