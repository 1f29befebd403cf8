"""The compile worker (codegen/compile_pool.py, compile_worker.py).

The worker tests need Triton 3.6 (the specialization format the worker reads) but no GPU: the
worker's children compile for sm_90 with Triton's own ptxas, and this process then compiles the
same launch and must find it in the cache. The GPU test runs a launch of two kernels compiled
side by side through the worker from empty caches.
"""
import os
import sys
import time

import pytest
import torch

from fuser.codegen import compile_pool

triton = pytest.importorskip("triton")
needs_triton_36 = pytest.mark.skipif(not triton.__version__.startswith("3.6."),
                                     reason="the worker reads Triton 3.6's specialization format")

KERNEL = '''import triton
import triton.language as tl


def scaled_rows(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=m, other=0.0).to(tl.float32)
    y = x * scale / tl.sum(tl.abs(x), 0)
    tl.store(y_ptr + row * n + cols, y.to(tl.bfloat16), mask=m)
'''


def _launch_spec(tmp_path, block: int = 1024):
    """A kernel module on disk, its JIT function, and the specialization Triton 3.6 would
    hand its JIT cache hook for one launch (pointers aligned, n and scale not specialized)."""
    import importlib.util

    from triton.backends.compiler import GPUTarget
    from triton.compiler import compiler
    from triton.runtime.jit import serialize_specialization_data

    path = tmp_path / "scaled_rows_k.py"
    path.write_text(KERNEL)
    name = f"fuser_kernels.scaled_rows_{tmp_path.name}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    fn = triton.jit(module.scaled_rows, do_not_specialize=["n", "scale"])
    target = GPUTarget("cuda", 90, 32)
    options = compiler.make_backend(target).parse_options({"num_warps": 4})
    signature = {"x_ptr": "*bf16", "y_ptr": "*bf16", "n": "i32", "scale": "fp32", "BLOCK": "constexpr"}
    constexprs = {(4,): block}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    data = serialize_specialization_data("scaled_rows", signature, constexprs, attrs, options, "key")
    request = {"path": str(path), "module": name, "name": "scaled_rows", "language": "triton",
               "do_not_specialize": ["n", "scale"], "specialization": data, "target": ("cuda", 90, 32),
               "cache_dir": str(tmp_path / "triton"), "triton_key": __import__("triton.runtime.cache").runtime.cache.triton_key(),
               "env": {k: v for k, v in os.environ.items() if k.startswith(compile_pool.ENV_PREFIXES)}}
    return fn, (signature, constexprs, attrs, options, target), request


def _worker(size: int = 2):
    pool = compile_pool.Pool(size)
    assert pool.wait_ready(60), "the compile worker did not start"
    return pool


@needs_triton_36
def test_what_a_worker_compiles_the_process_finds_in_the_cache(tmp_path, monkeypatch):
    from triton import knobs
    from triton.compiler import compiler

    from fuser.codegen.compile_worker import in_disk_cache, launch_source

    fn, (signature, constexprs, attrs, options, target), request = _launch_spec(tmp_path)
    monkeypatch.setattr(knobs.cache, "dir", request["cache_dir"])
    src, parsed = launch_source(fn, "triton", request["specialization"], target)
    assert src.hash() == compiler.ASTSource(fn, signature, constexprs, attrs).hash()
    assert not in_disk_cache(src, parsed, target)
    worker = _worker()
    try:
        reply = worker.request(request)
        assert reply is not None and "error" not in reply, reply
        assert reply["times"]["hit"] is False and reply["times"]["ast"] > 0
        # the same launch again: another child finds the first one's kernel
        assert worker.request(request)["times"]["hit"] is True
    finally:
        worker.close()
    assert in_disk_cache(src, parsed, target)  # what the pool checks before asking a worker
    hits = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: hits.append(kw["cache_hit"]))
    kernel = compiler.compile(compiler.ASTSource(fn, signature, constexprs, attrs), target=target,
                              options=options.__dict__)
    assert hits == [True] and kernel.hash == reply["hash"]


@needs_triton_36
def test_a_failing_request_is_answered_and_the_worker_goes_on(tmp_path):
    _, _, request = _launch_spec(tmp_path)
    worker = _worker()
    try:
        missing = dict(request, path=str(tmp_path / "nowhere.py"))
        reply = worker.request(missing)
        assert "FileNotFoundError" in reply["error"] or "No such file" in reply["error"]
        bad = dict(request, name="no_such_kernel")
        assert "AttributeError" in worker.request(bad)["error"]
        assert "error" not in worker.request(request)
    finally:
        worker.close()


def test_a_worker_that_cannot_start_is_given_up(monkeypatch):
    monkeypatch.setenv("PYTHONHOME", "/nonexistent")
    start = time.perf_counter()
    pool = compile_pool.Pool(2, env=dict(os.environ))
    assert pool.wait_ready(30) is False and not pool.usable()
    assert time.perf_counter() - start < 30
    assert pool.request({"anything": 1}) is None  # refused at once: the caller compiles


@needs_triton_36
def test_compiles_run_side_by_side_in_children_and_a_dead_child_is_answered_for(tmp_path, monkeypatch):
    """Four different launches sent at once each come back with their own kernel; a child
    killed mid-compile is answered for, and the worker goes on; a killed worker refuses
    requests at once."""
    import threading

    from triton.compiler import compiler

    monkeypatch.setattr(compile_pool, "REPLY_TIMEOUT_S", 30.0)  # a lost reply fails, not hangs
    specs = [_launch_spec(tmp_path / f"k{b}", block=b) for b in (128, 256, 512, 1024)
             if (tmp_path / f"k{b}").mkdir() is None]
    requests = [spec[2] for spec in specs]
    pool = _worker(size=4)
    try:
        replies = [None] * 4

        def ask(k):
            replies[k] = pool.request(requests[k])

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(r is not None and "error" not in r for r in replies), replies
        for (fn, (signature, constexprs, attrs, options, target), request), reply in zip(specs, replies):
            src = compiler.ASTSource(fn, signature, constexprs, attrs)
            monkeypatch.setattr(__import__("triton").knobs.cache, "dir", request["cache_dir"])
            assert compiler.compile(src, target=target, options=options.__dict__).hash == reply["hash"]
        assert all(r["times"]["hit"] is False for r in replies)

        # a child that dies: SIGKILL it while it compiles (its module sleeps at import)
        mark = tmp_path / "slow.pid"
        slow = tmp_path / "slow_k.py"
        slow.write_text(f"import os, time\nopen({str(mark)!r}, 'w').write(str(os.getpid()))\ntime.sleep(30)\n" + KERNEL)
        dying = dict(requests[0], path=str(slow), module="fuser_kernels.slow_k")
        killer = threading.Thread(target=lambda: (_wait_for(mark), os.kill(int(mark.read_text()), 9)))
        killer.start()
        reply = pool.request(dying)
        killer.join(60)
        assert reply is not None and "the compile process ended (signal 9)" in reply["error"], reply
        assert "error" not in pool.request(requests[1])  # the worker goes on
    finally:
        pool.proc.kill()
        pool.proc.wait()
    start = time.perf_counter()
    while pool.usable() and time.perf_counter() - start < 10:
        time.sleep(0.01)
    assert not pool.usable() and pool.request(requests[2]) is None


def _wait_for(path, timeout: float = 60.0) -> None:
    start = time.perf_counter()
    while not (path.exists() and path.read_text()):
        assert time.perf_counter() - start < timeout
        time.sleep(0.01)


def test_nothing_is_sent_outside_a_side_by_side_compile_or_for_other_kernels():
    class Kernel:
        fuser_origin = ("p", "m", "k", "triton", [])

        def run(self, *args, **kwargs):
            raise AssertionError("not asked")

    assert compile_pool.compile_first(Kernel(), [], {}, (1,)) is None  # not side by side
    with compile_pool.side_by_side():
        assert compile_pool.compile_first(object(), [], {}, (1,)) is None  # not fuser's
    before = compile_pool.STATS["missed"]
    compile_pool.record_hit(None, object())  # nothing sent: no miss to count
    assert compile_pool.STATS["missed"] == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@needs_triton_36
def test_a_launch_of_two_kernels_compiles_in_workers_from_empty_caches(tmp_path, monkeypatch):
    from triton import knobs

    from fuser import DataType, FusionDefinition

    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path / "fuser"))
    monkeypatch.setenv("FUSER_COMPILE_WORKERS", "2")
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton"))
    compile_pool.start()
    pool = compile_pool._get_pool()
    assert pool is not None and pool.wait_ready(60)  # ready before the launch: it uses it
    before = dict(compile_pool.STATS)
    # kernels around a matmul: the runtime compiles them ahead, side by side (kernels of their
    # own: a kernel another test compiled is in Triton's memory and compiles nowhere)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        h = fd.ops.cast(fd.ops.relu(fd.ops.mul(fd.ops.cast(x, DataType.Float), -3.5)), DataType.BFloat16)
        m = fd.ops.cast(fd.ops.matmul(h, w), DataType.Float)
        fd.add_output(fd.ops.max(fd.ops.abs(m), [1]))
        fd.add_output(fd.ops.sum(fd.ops.mul(m, 0.25), [0]))
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 2048, device="cuda", dtype=torch.bfloat16)
    rows, cols = fd.execute([x, w])
    m = (torch.relu(x.float() * -3.5).bfloat16() @ w).float()
    torch.testing.assert_close(rows, m.abs().amax(1), rtol=1e-3, atol=1e-1)
    torch.testing.assert_close(cols, (m * 0.25).sum(0), rtol=1e-3, atol=1e-1)
    assert compile_pool.STATS["compiled"] >= before["compiled"] + 2, compile_pool.STATS
    assert compile_pool.STATS["missed"] == before["missed"]


def test_the_worker_compiles_up_to_eight_at_once_by_default_and_none_on_small_machines(monkeypatch):
    monkeypatch.delenv("FUSER_COMPILE_WORKERS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for cpus, expected in ((16, 8), (6, 6), (4, 4), (2, 0), (None, 0)):
        monkeypatch.setattr(compile_pool, "_processors", lambda cpus=cpus: cpus or 1)
        assert compile_pool.worker_count() == expected
    monkeypatch.setattr(compile_pool, "_processors", lambda: 64)
    for local, expected in (("8", 8), ("16", 4), ("32", 0), ("", 8), ("x", 8)):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)  # torchrun's processes share the machine
        assert compile_pool.worker_count() == expected
    monkeypatch.setenv("FUSER_COMPILE_WORKERS", "0")
    monkeypatch.setattr(compile_pool, "_processors", lambda: 16)
    assert compile_pool.worker_count() == 0 and not compile_pool.available()


@needs_triton_36
def test_a_child_past_its_deadline_is_killed_and_a_full_worker_is_busy(tmp_path, monkeypatch):
    """A compile that outlives its deadline is killed by the worker and answered for (the
    asking process compiles it); while every slot is taken, a request is answered BUSY at
    once rather than waiting."""
    import threading

    _, _, request = _launch_spec(tmp_path)
    slow = tmp_path / "slow_deadline_k.py"
    slow.write_text("import time\ntime.sleep(60)\n" + KERNEL)
    monkeypatch.setattr(compile_pool, "REPLY_TIMEOUT_S", 1.0)
    pool = _worker(size=1)
    try:
        replies = []
        held = threading.Thread(target=lambda: replies.append(
            pool.request(dict(request, path=str(slow), module="fuser_kernels.slow_deadline_k"))))
        start = time.perf_counter()
        held.start()
        time.sleep(0.3)
        assert pool.request(request) is compile_pool.Pool.BUSY
        held.join(30)
        assert "longer than its deadline" in replies[0]["error"], replies
        assert time.perf_counter() - start < 10
        assert "error" not in pool.request(request)  # the slot is free again
    finally:
        pool.close()


def test_at_exit_a_request_waiting_for_its_reply_gets_none_and_no_new_one_is_sent(tmp_path, monkeypatch):
    """The process's exit (background.py): a background thread waiting on the worker stops
    waiting (it then compiles nothing), and a request made after it is refused at once."""
    import threading

    from fuser.codegen import background

    monkeypatch.setattr(background, "_exiting", threading.Event())  # (this process goes on)
    from fuser.codegen.compile import triton_key_now

    slow = tmp_path / "slow_exit_k.py"
    slow.write_text("import time\ntime.sleep(60)\n" + KERNEL)
    # (the child imports the kernel's module before it reads the rest)
    request = {"path": str(slow), "module": "fuser_kernels.slow_exit_k", "name": "scaled_rows", "env": {},
               "triton_key": triton_key_now(), "cache_dir": str(tmp_path / "triton")}
    pool = _worker(size=2)
    try:
        replies = []
        held = threading.Thread(target=lambda: replies.append(pool.request(request)))
        held.start()
        time.sleep(0.3)
        start = time.perf_counter()
        background.begin_exit()
        pool.release_waiting()
        held.join(30)
        assert replies == [None] and time.perf_counter() - start < 5
        assert pool.request(request) is None
    finally:
        pool.close()


def test_a_reply_too_long_for_one_pipe_write_is_replaced_by_an_error():
    from fuser.codegen.compile_worker import PIPE_BUF, _answer, read_frame

    read, write = os.pipe()
    try:
        _answer(write, {"id": 7, "error": "x" * (2 * PIPE_BUF)})
        assert read_frame(read) == {"id": 7, "error": "the reply did not fit one pipe write"}
        os.write(write, (1 << 30).to_bytes(4, "little"))  # a header no frame has
        assert read_frame(read) is None
    finally:
        os.close(read)
        os.close(write)


@needs_triton_36
def test_an_interrupt_of_the_user_s_process_group_spares_the_worker_and_a_forked_child_drops_it(tmp_path):
    import signal

    _, _, request = _launch_spec(tmp_path)
    pool = _worker()
    try:
        assert os.getpgid(pool.proc.pid) != os.getpgid(0)  # a session of its own
        os.kill(pool.proc.pid, signal.SIGINT)  # as a Ctrl-C sent to a process group would
        time.sleep(0.3)
        assert pool.usable() and "error" not in pool.request(request)
        previous, compile_pool._pool = compile_pool._pool, pool
        try:
            child = os.fork()
            if child == 0:  # the child must not use (or keep open) its parent's worker
                os._exit(0 if not pool.usable() else 1)
            _, status = os.waitpid(child, 0)
        finally:
            compile_pool._pool = previous
        assert os.waitstatus_to_exitcode(status) == 0 and pool.usable()
    finally:
        pool.close()
