#!/usr/bin/env python3
"""Soak under faults: drives `mlaserve serve` on a tiny model on loopback with random load for
a bounded time -- plain and sampled requests, Abort RPCs, client cancels, short deadlines,
slow readers that never read, bursts above the queue limit and invalid requests -- then checks
that every stream ended with a Complete or a status, no KV block leaked, the engine is idle,
the daemon still answers, and reports the resident-memory growth. Last, it kills the daemon
with SIGKILL under load and checks that a restart comes back SERVING; and it sends input past
the limits (an 18 MiB Generate, a 1 MiB HTTP header to /metrics) and checks the refusals.

Usage: soak_test.py --mlaserve=BIN --protoc=PROTOC --source_dir=DIR [--seconds=N]
(MLASERVE_SOAK_SECONDS overrides the default duration.) Prints a summary line per figure.
"""
import collections
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import shutil
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_server_test as common  # noqa: E402  (protos, the model dir, the client)

grpc = common.grpc
ARGS = None

MAX_NUM_SEQS = 8
MAX_QUEUE = 24
WRITE_TIMEOUT_S = 1.0
VOCAB = 256
# Resident memory may grow while allocators and gRPC warm up; beyond this it is a leak.
RSS_GROWTH_LIMIT_MB = 64


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class Daemon:
    """One `mlaserve serve` process on `port`."""

    def __init__(self, workdir, model, port, metrics_port=0):
        self.log_path = os.path.join(workdir, "mlaserve-%d.log" % time.monotonic_ns())
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [ARGS.mlaserve, "serve", "--model=" + model, "--host=127.0.0.1", "--http_port=0",
             "--port=%d" % port, "--backend=cpu", "--threads=2",
             "--max_num_seqs=%d" % MAX_NUM_SEQS, "--max_num_batched_tokens=256",
             "--block_size=16", "--kv_cache_tokens=8192", "--max_queue=%d" % MAX_QUEUE,
             "--stream_write_timeout_s=%g" % WRITE_TIMEOUT_S, "--drain_timeout_s=2",
             "--log_format=json", "--metrics_host=127.0.0.1",
             "--metrics_port=%d" % metrics_port],
            stderr=self.log)

    def wait_serving(self, client, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if client.check(common.health.HealthCheckRequest(), timeout=2).status == \
                        common.health.HealthCheckResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
            if self.process.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def stop(self, sig=signal.SIGTERM):
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)
        self.log.close()

    def text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()


class Load:
    """Random traffic from several threads until `stop` is set; counts every outcome."""

    def __init__(self, port, seed):
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.outcomes = collections.Counter()
        self.violations = []
        self.seed = seed
        self.next_id = 0

    def record(self, outcome):
        with self.lock:
            self.outcomes[outcome] += 1

    def violation(self, what):
        with self.lock:
            self.violations.append(what)

    def request_id(self):
        with self.lock:
            self.next_id += 1
            return "soak-%d-%d" % (self.seed, self.next_id)

    def run_stream(self, client, request, timeout=None, cancel_after=None, abort_after=None):
        """Runs one Generate; returns its outcome label. Checks the stream's ending."""
        call = client.generate(request, timeout=timeout)
        if abort_after is not None:
            def abort():
                try:
                    client.abort(common.pb.AbortRequest(request_ids=[request.request_id]))
                except (grpc.RpcError, ValueError):
                    pass  # the daemon is gone (the kill test), or the channel closed
            threading.Timer(abort_after, abort).start()
        complete = None
        chunks = 0
        try:
            for response in call:
                if response.HasField("complete"):
                    if complete is not None:
                        self.violation("two Completes on %s" % request.request_id)
                    complete = response.complete
                else:
                    if complete is not None:
                        self.violation("a Chunk after the Complete on %s" % request.request_id)
                    chunks += 1
                    if cancel_after is not None and chunks >= cancel_after:
                        call.cancel()
        except grpc.RpcError as e:
            return "status:" + e.code().name.lower()
        if complete is None:
            self.violation("stream %s ended OK without a Complete" % request.request_id)
            return "violation"
        return "complete:" + common.pb.FinishReason.Name(complete.finish_reason).lower()

    def request(self, rng, max_tokens, **kwargs):
        prompt = [rng.randrange(VOCAB - 2) for _ in range(rng.randint(1, 300))]
        sampling = common.pb.SamplingParams(temperature=0.0)
        if rng.random() < 0.5:
            sampling = common.pb.SamplingParams(temperature=0.8, top_p=0.9,
                                                seed=rng.randrange(1 << 30))
        return common.pb.GenerateRequest(
            request_id=self.request_id(), token_ids=common.pb.TokenIds(ids=prompt),
            sampling=sampling,
            stopping=common.pb.StoppingCriteria(max_tokens=max_tokens, ignore_eos=True),
            **kwargs)

    def slow_reader(self, rng):
        """A client with a small window that stops reading: the server must cancel it."""
        channel = grpc.insecure_channel(
            "127.0.0.1:%d" % self.port,
            options=[("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)])
        try:
            client = common.Client(channel)
            call = client.generate(self.request(rng, 3000), timeout=30)
            time.sleep(WRITE_TIMEOUT_S * 3)
            try:
                for _ in call:
                    pass
                return "slow_reader:finished"  # the request ended before the window filled
            except grpc.RpcError as e:
                return "slow_reader:" + e.code().name.lower()
        finally:
            channel.close()

    def burst(self, client, rng):
        """More requests at once than running + queued slots: some are refused."""
        calls = [client.generate(self.request(rng, 4)) for _ in range(MAX_NUM_SEQS + MAX_QUEUE + 16)]
        outcomes = []
        for call in calls:
            try:
                ended = any(r.HasField("complete") for r in call)
                outcomes.append("complete" if ended else "violation")
            except grpc.RpcError as e:
                outcomes.append("status:" + e.code().name.lower())
        for o in outcomes:
            self.record("burst:" + o)
        return None

    def worker(self, index):
        rng = random.Random(self.seed * 1000 + index)
        channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        client = common.Client(channel)
        while not self.stop.is_set():
            kind = rng.choices(
                ["plain", "cancel", "deadline", "abort", "slow", "burst", "invalid"],
                weights=[40, 12, 12, 12, 3, 2, 8])[0]
            try:
                if kind == "plain":
                    outcome = self.run_stream(client, self.request(rng, rng.randint(1, 48)))
                elif kind == "cancel":
                    outcome = self.run_stream(client, self.request(rng, 400),
                                              cancel_after=rng.randint(1, 20))
                elif kind == "deadline":
                    outcome = self.run_stream(client, self.request(rng, 2000),
                                              timeout=rng.uniform(0.01, 0.5))
                elif kind == "abort":
                    outcome = self.run_stream(client, self.request(rng, 2000),
                                              abort_after=rng.uniform(0.0, 0.3))
                elif kind == "slow":
                    outcome = self.slow_reader(rng)
                elif kind == "burst":
                    outcome = self.burst(client, rng)
                else:
                    bad = self.request(rng, 8)
                    bad.token_ids.ids.append(VOCAB + rng.randrange(1000))
                    outcome = self.run_stream(client, bad)
            except grpc.RpcError as e:  # unary Abort racing the end of its stream
                outcome = "rpc_error:" + e.code().name.lower()
            if outcome is not None:
                self.record(kind + "/" + outcome)
        channel.close()


class DaemonTestCase(unittest.TestCase):
    """A model directory, a port and daemons started on it."""

    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="mlaserve_soak_")
        common.generate_messages(cls.workdir)
        cls.model = common.make_model_dir(cls.workdir)
        cls.port = common.free_port()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def start_daemon(self, metrics_port=0):
        daemon = Daemon(self.workdir, self.model, self.port, metrics_port)
        channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.addCleanup(channel.close)
        client = common.Client(channel)
        if not daemon.wait_serving(client):
            daemon.stop(signal.SIGKILL)
            self.fail("mlaserve did not become SERVING; log:\n" + daemon.text())
        return daemon, client

    def assert_idle_without_leak(self, client):
        deadline = time.time() + 15
        while True:
            info = client.server_info(common.pb.GetServerInfoRequest())
            if (info.num_running == 0 and info.num_waiting == 0
                    and info.kv_blocks_free == info.kv_blocks_total):
                return info
            if time.time() > deadline:
                self.fail("engine not idle or KV blocks leaked: %s" % info)
            time.sleep(0.05)



class SoakTest(DaemonTestCase):
    def test_1_random_load_with_faults(self):
        daemon, client = self.start_daemon()
        try:
            # Warm-up, so that the first RSS reading includes the allocator's working set.
            for _ in range(20):
                list(client.generate(common.greedy([1, 2, 3], 16)))
            rss_start = rss_mb(daemon.process.pid)
            load = Load(self.port, seed=int(os.environ.get("MLASERVE_SOAK_SEED", "1")))
            threads = [threading.Thread(target=load.worker, args=(i,)) for i in range(10)]
            started = time.time()
            for t in threads:
                t.start()
            time.sleep(ARGS.seconds)
            load.stop.set()
            for t in threads:
                t.join(timeout=120)
            elapsed = time.time() - started
            self.assertFalse(any(t.is_alive() for t in threads), "a load thread hung")
            info = self.assert_idle_without_leak(client)
            rss_end = rss_mb(daemon.process.pid)
            # Still answers, with the right result.
            ids, _, complete = common.collect(client.generate(common.greedy([1, 2, 3], 8)))
            self.assertEqual(len(ids), 8)
            self.assertEqual(complete.finish_reason, common.pb.FINISH_REASON_LENGTH)

            total = sum(load.outcomes.values())
            print("\nsoak: %.0f s, %d calls" % (elapsed, total))
            for outcome, n in sorted(load.outcomes.items()):
                print("soak:   %-40s %6d" % (outcome, n))
            print("soak: KV blocks free %d of %d after the load" % (
                info.kv_blocks_free, info.kv_blocks_total))
            print("soak: RSS %.1f MiB after warm-up, %.1f MiB after the load (%+.1f MiB)" % (
                rss_start, rss_end, rss_end - rss_start))
            self.assertEqual(load.violations, [])
            self.assertNotIn("violation", " ".join(load.outcomes))
            # Every fault actually happened.
            for needed in ("plain/complete:finish_reason_length", "cancel/status:cancelled",
                           "invalid/status:invalid_argument"):
                self.assertGreater(load.outcomes[needed], 0, needed)
            self.assertGreater(sum(n for o, n in load.outcomes.items()
                                   if o.startswith("deadline/status:deadline_exceeded")), 0)
            self.assertGreater(sum(n for o, n in load.outcomes.items()
                                   if o.startswith("abort/complete:finish_reason_abort")), 0)
            self.assertLess(rss_end - rss_start, RSS_GROWTH_LIMIT_MB)
        finally:
            daemon.stop()
        self.assertEqual(daemon.process.returncode, 0, daemon.text()[-3000:])

    def test_2_kill_minus_nine_under_load_and_restart(self):
        daemon, _ = self.start_daemon()
        load = Load(self.port, seed=2)
        threads = [threading.Thread(target=load.worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(2)
        daemon.stop(signal.SIGKILL)
        load.stop.set()
        for t in threads:
            t.join(timeout=60)
        self.assertEqual(daemon.process.returncode, -signal.SIGKILL)
        # No state survives a crash, so a restart serves at once.
        restarted, client = self.start_daemon()
        try:
            ids, _, _ = common.collect(client.generate(common.greedy([5, 6, 7], 4)))
            self.assertEqual(len(ids), 4)
            self.assert_idle_without_leak(client)
            print("\nsoak: killed with SIGKILL after %d calls; the restart served" %
                  sum(load.outcomes.values()))
        finally:
            restarted.stop()


class OversizedInputTest(DaemonTestCase):
    """Input past the limits is refused cleanly and the daemon keeps serving."""

    def test_3_oversized_grpc_message_and_http_request(self):
        metrics_port = common.free_port()
        daemon, client = self.start_daemon(metrics_port)
        try:
            # Past --max_message_bytes (16 MiB): refused by gRPC before it is parsed.
            huge = common.greedy([200] * (9 << 20), 1)  # two bytes per id
            with self.assertRaises(grpc.RpcError) as caught:
                list(client.generate(huge))
            self.assertEqual(caught.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            # A metrics request with a 1 MiB header: an HTTP error or a closed connection.
            with socket.create_connection(("127.0.0.1", metrics_port), timeout=10) as s:
                try:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
                              b"a" * (1 << 20) + b"\r\n\r\n")
                    answer = s.recv(64)
                except (ConnectionResetError, BrokenPipeError):
                    answer = b""
            self.assertFalse(answer.startswith(b"HTTP/1.1 200"), answer)
            # Both ports still serve.
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port,
                                        timeout=10) as r:
                self.assertIn(b"mlaserve_num_requests_running", r.read())
            ids, _, _ = common.collect(client.generate(common.greedy([1, 2], 2)))
            self.assertEqual(len(ids), 2)
            print("\noversized: 18 MiB Generate -> RESOURCE_EXHAUSTED; 1 MiB HTTP header -> %r" %
                  answer[:32])
        finally:
            daemon.stop()


if __name__ == "__main__":
    common.run_tests(globals(), add_flags=lambda p: p.add_argument(
        "--seconds", type=float, default=float(os.environ.get("MLASERVE_SOAK_SECONDS", "45"))))
