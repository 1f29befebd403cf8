"""The compile worker: a Python process that compiles fuser's kernels into Triton's disk cache.

Run as a script by compile_pool.py, never imported by the fuser package: it imports Triton only
(no torch, no fuser). It starts once per process and forks a child for each compile, so that
compiles run side by side, each in a process of its own, without each paying for Python,
Triton's imports and the first compile's one-time work (0.3-0.9 s): the worker does those once,
with a warm-up compile of a small kernel into a scratch cache, before it says it is ready.
It stays single-threaded (Triton compiles on the calling thread), so forking it is safe.

Requests come on stdin and replies go out on stdout, as frames of a 4-byte length and a pickle
(anything else printed goes to stderr). A request carries an id and names a generated kernel
module (its file, module name and function), how fuser wraps it (Triton's or Gluon's JIT, the
parameters never specialized), Triton's specialization of one launch (the JSON that Triton
hands its JIT cache hook), the target, Triton's cache directory and installation key, and the
compiler's environment variables. The child compiles exactly what
`JITFunction.run(..., warmup=True)` would and answers with the request's id, the kernel's cache
hash and the time of each compile stage, in one write of at most PIPE_BUF bytes (so the
replies of children writing at once do not interleave); the worker answers for a child that
died without answering. Stdin closed: the worker ends its children and exits.
"""
import importlib.util
import json
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time

ENV_PREFIXES = ("TRITON_", "MLIR_", "LLVM_", "NVPTX_", "PTXAS_")
MAX_FRAME = 64 << 20  # bytes: a longer length is not a frame (something else wrote on the stream)
PIPE_BUF = getattr(select, "PIPE_BUF", 512)  # bytes a pipe writes at once, unsplit (POSIX: at least 512)


def _read_exactly(fd: int, size: int) -> bytes:
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return b""
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int):
    """One frame from a pipe read unbuffered (select and poll must see every unread byte), or
    None: the pipe closed or what came is no frame."""
    header = _read_exactly(fd, 4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack("<I", header)
    if size > MAX_FRAME:
        return None
    body = _read_exactly(fd, size)
    return pickle.loads(body) if len(body) == size else None


def _frame(obj) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack("<I", len(data)) + data


def _answer(fd: int, reply: dict) -> None:
    """One reply in one write (replies of children writing at once must not interleave)."""
    frame = _frame(reply)
    if len(frame) > PIPE_BUF:
        frame = _frame({"id": reply.get("id"), "error": "the reply did not fit one pipe write"})
    os.write(fd, frame)


def write_frame(stream, obj) -> None:
    stream.write(_frame(obj))
    stream.flush()


class Worker:
    def __init__(self):
        import triton
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.compiler import compiler

        self.triton, self.knobs, self.GPUTarget, self.compiler = triton, knobs, GPUTarget, compiler
        self.kernels = {}
        self.key = None
        self.times = None
        knobs.compilation.listener = self._listen

    def _listen(self, **kw):
        t = kw["times"]
        self.times = dict([("ast", t.ir_initialization), *t.lowering_stages, ("store", t.store_results)],
                          hit=bool(kw.get("cache_hit")))

    def _environment(self, env: dict) -> None:
        """The asking process's compiler variables, exactly (Triton keys its cache by them)."""
        for name in [n for n in os.environ if n.startswith(ENV_PREFIXES) and n not in env]:
            del os.environ[name]
        os.environ.update(env)

    def _triton_key(self, key: str) -> None:
        """Triton's installation digest as the asking process has it (hashing Triton's files
        again would cost this process 0.3-1 s)."""
        if key == self.key:
            return
        self.key = key
        from triton.runtime import cache
        for home in (cache, self.compiler):
            if hasattr(home, "triton_key"):
                home.triton_key = lambda: key

    def _kernel(self, request: dict):
        found = self.kernels.get(request["path"])
        if found is None:
            spec = importlib.util.spec_from_file_location(request["module"], request["path"])
            module = importlib.util.module_from_spec(spec)
            sys.modules[request["module"]] = module  # Triton resolves helpers through the module
            spec.loader.exec_module(module)
            raw = getattr(module, request["name"])
            if request["language"] == "gluon":
                from triton.experimental import gluon
                found = gluon.jit(raw, do_not_specialize=list(request["do_not_specialize"]))
            else:
                found = self.triton.jit(raw, do_not_specialize=list(request["do_not_specialize"]))
            self.kernels[request["path"]] = found
        return found

    def compile(self, request: dict) -> dict:
        self._environment(request["env"])
        self._triton_key(request["triton_key"])
        self.knobs.cache.dir = request["cache_dir"]
        fn = self._kernel(request)
        target = self.GPUTarget(*request["target"])
        src, options = launch_source(fn, request["language"], request["specialization"], target)
        start = time.perf_counter()
        self.times = None
        kernel = self.compiler.compile(src, target=target, options=options.__dict__)
        return {"hash": kernel.hash, "seconds": time.perf_counter() - start, "times": self.times}


def launch_source(fn, language: str, specialization: str, target):
    """(Triton source, parsed options) of one launch of `fn`, from the JSON Triton hands its JIT
    cache hook, read as Triton's `JITFunction.preload` reads it."""
    import triton.language as tl
    from triton.compiler import compiler
    from triton.runtime.jit import convert_to_tuple_if_list

    data = json.loads(specialization)
    constexprs = {
        tuple(k): tl.dtype(v) if tl.dtype.is_dtype(v) else
        tl.constexpr(v["constexpr"]) if isinstance(v, dict) and "constexpr" in v else v
        for k, v in zip(data["constant_keys"], data["constant_vals"])}
    attrs = dict(zip(map(tuple, data["attrs_keys"]), data["attrs_vals"]))
    signature = {k: convert_to_tuple_if_list(v) for k, v in data["signature"].items()}
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in data["options"].items()}
    options = compiler.make_backend(target).parse_options(options)
    if language == "gluon":  # (Triton sets a JIT function's source class at its first launch)
        from triton.experimental.gluon._runtime import GluonASTSource as source_class
    else:
        source_class = compiler.ASTSource
    return source_class(fn, signature, constexprs, attrs), options


def in_disk_cache(src, options, target) -> bool:
    """Whether Triton's disk cache holds this compile (the key and lookup of `triton.compile`)."""
    import hashlib

    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler import compiler
    from triton.runtime.cache import get_cache_key, get_cache_manager

    backend = compiler.make_backend(target)
    options = backend.parse_options(dict(options.__dict__, **src.parse_options()))
    key = get_cache_key(src, backend, options, env_vars=get_cache_invalidating_env_vars())
    manager = get_cache_manager(hashlib.sha256(key.encode("utf-8")).hexdigest())
    name = f"{src.name[:150]}.json"
    return (manager.get_group(name) or {}).get(name) is not None


def _warm_up(worker: "Worker") -> None:
    """Pay the first compile's one-time work (imports, LLVM's and ptxas's setup) here, once,
    with a small kernel compiled into a scratch cache, so that no child pays it."""
    import shutil

    from triton.compiler import compiler
    import triton.language as tl

    try:  # the modules a Gluon kernel's compile imports
        importlib.import_module("triton.experimental.gluon._runtime")
    except ImportError:
        pass

    def warm_up_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        tl.store(x_ptr + offsets, tl.exp(x) / tl.sum(x, 0), mask=offsets < n)

    scratch = tempfile.mkdtemp(prefix="fuser-compile-worker-")
    previous = worker.knobs.cache.dir
    try:
        worker.knobs.cache.dir = scratch
        worker._triton_key("warm-up")  # (the asking process's key comes with each request)
        signature = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
        src = compiler.ASTSource(worker.triton.jit(warm_up_kernel), signature, {(2,): 128}, {})
        compiler.compile(src, target=worker.GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    finally:
        worker.knobs.cache.dir = previous
        shutil.rmtree(scratch, ignore_errors=True)


def _compile_in_child(worker: "Worker", request: dict, replies: int) -> None:
    """In a forked child: compile, answer, exit (never returns)."""
    code = 0
    try:
        try:
            reply = worker.compile(request)
        except BaseException as error:  # noqa: BLE001 - the asking process compiles it and reports
            reply = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        reply["id"] = request.get("id")
        _answer(replies, reply)
    except BaseException:  # noqa: BLE001 - the worker reports the child's death instead
        code = 1
    os._exit(code)


def _kill_late(children: dict, replies: int) -> None:
    """Kill the children past their request's deadline and answer for them (the asking
    process then compiles the kernel itself)."""
    now = time.monotonic()
    for pid, (request_id, deadline) in list(children.items()):
        if now > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
            del children[pid]
            _answer(replies, {"id": request_id, "error": "the compile took longer than its deadline"})


def _reap(children: dict, replies: int) -> None:
    """Collect ended children; answer for each that ended without answering."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        request_id, _ = children.pop(pid, (None, None))
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit status {os.waitstatus_to_exitcode(status)}")
            _answer(replies, {"id": request_id, "error": f"the compile process ended ({how})"})


def serve(worker: "Worker", requests: int, replies: int) -> None:
    """Fork a child a request until stdin closes; then end the children still compiling."""
    children: dict[int, tuple] = {}  # pid -> (request id, deadline)
    try:
        while True:
            readable = select.select([requests], [], [], 0.05)[0]
            _reap(children, replies)
            _kill_late(children, replies)
            if not readable:
                continue
            request = read_frame(requests)
            if request is None:
                return
            try:
                pid = os.fork()
            except OSError as error:  # (no memory or processes left: this one compiles there)
                _answer(replies, {"id": request.get("id"), "error": f"fork failed: {error}"})
                continue
            if pid == 0:
                _compile_in_child(worker, request, replies)
            children[pid] = (request.get("id"), time.monotonic() + float(request.get("deadline_s", 300.0)))
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for the user's process; stdin's end stops this one
    replies = os.dup(1)
    os.dup2(2, 1)  # a stray print must not corrupt the frames
    try:
        worker = Worker()
        _warm_up(worker)
        threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
        if threads != 1:  # (another Triton that starts threads: forking it would not be safe)
            raise RuntimeError(f"the worker runs {threads} threads after its warm-up; it forks only with one")
    except BaseException as error:  # noqa: BLE001 - the pool falls back to compiling in its process
        _answer(replies, {"ready": False, "error": f"{type(error).__name__}: {str(error)[:300]}"})
        return
    _answer(replies, {"ready": True, "pid": os.getpid()})
    serve(worker, sys.stdin.fileno(), replies)


if __name__ == "__main__":
    main()
