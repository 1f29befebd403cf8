"""A compile worker: a Python process that compiles fuser's kernels into Triton's disk cache.

Run as a script by compile_pool.py, never imported by the fuser package: it imports Triton only
(no torch, no fuser), so it starts in a fraction of a second. It reads requests from stdin and
answers each on stdout, as frames of a 4-byte length and a pickle (anything else printed goes
to stderr). A request names a generated kernel module (its file, module name and function),
how fuser wraps it (Triton's or Gluon's JIT, the parameters never specialized), Triton's
specialization of one launch (the JSON that Triton hands its JIT cache hook), the target,
Triton's cache directory and installation key, and the compiler's environment variables; the
worker compiles exactly what `JITFunction.run(..., warmup=True)` would and answers with the
kernel's cache hash and the time of each compile stage. Stdin closed: the worker exits.
"""
import importlib.util
import json
import os
import pickle
import struct
import sys
import time

ENV_PREFIXES = ("TRITON_", "MLIR_", "LLVM_", "NVPTX_", "PTXAS_")


def _read_frame(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack("<I", header)
    return pickle.loads(stream.read(size))


def write_frame(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<I", len(data)) + data)
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


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the frames
    requests = sys.stdin.buffer
    try:
        worker = Worker()
    except BaseException as error:  # noqa: BLE001 - the pool falls back to compiling in its process
        write_frame(replies, {"ready": False, "error": f"{type(error).__name__}: {error}"})
        return
    write_frame(replies, {"ready": True, "pid": os.getpid()})
    while True:
        request = _read_frame(requests)
        if request is None:
            return
        try:
            reply = worker.compile(request)
        except BaseException as error:  # noqa: BLE001 - the asking process compiles it and reports
            reply = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        write_frame(replies, reply)


if __name__ == "__main__":
    main()
