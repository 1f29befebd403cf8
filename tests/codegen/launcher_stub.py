"""Run as a script by test_generic_launcher.py: load a stand-in libcuda.so.1 that records launches
instead of making them, import fuser's launcher module built against it, launch through it,
and print what the stand-in recorded, as JSON. In a process of its own, so that no real
libcuda is loaded first. Needs no torch and no GPU.

    python launcher_stub.py STUB.so MODULE.so
"""
import ctypes
import importlib.machinery
import importlib.util
import json
import sys


class Tensorish:
    """An object with data_ptr(), as a tensor argument is."""

    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


def main(stub_path: str, module_path: str) -> None:
    stub = ctypes.CDLL(stub_path, mode=ctypes.RTLD_GLOBAL)  # first: the module's libcuda.so.1
    loader = importlib.machinery.ExtensionFileLoader("fuser_launch", module_path)
    spec = importlib.util.spec_from_file_location("fuser_launch", module_path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    stub.stub_param.restype = ctypes.c_uint64
    stub.stub_config.restype = ctypes.c_uint64
    stub.stub_attribute.restype = ctypes.c_uint64

    def recorded():
        params = [stub.stub_param(k) for k in range(stub.stub_param_count())]
        config = {name: stub.stub_config(k) for k, name in enumerate(
            ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "shared", "stream", "function"))}
        attributes = [[stub.stub_attribute(k, 0), stub.stub_attribute(k, 1), stub.stub_attribute(k, 2)]
                      for k in range(stub.stub_attribute_count())]
        return dict(launches=stub.stub_launches(), params=params, config=config, attributes=attributes,
                    non_portable=stub.stub_non_portable())

    out = {}
    codes = b"ppifgedLcbhBHIK"
    kernel_args = [Tensorish(0x10000), 0x20000, -5, 1.5, -2.75, 0.5, 3.25, -(2 ** 40), "ignored",
                   -3, -300, 255, 65535, 2 ** 32 - 1, 2 ** 64 - 1]
    launch = module.make_launch(codes)
    params = sum(c != ord("c") for c in codes) + 2  # the stand-in reads this many from "function"
    launch(2, 3, 4, 77, params, False, True, None, Tensorish(0x30000), (4, 1, 1024), None, None, None,
           *kernel_args)
    out["scalars"] = recorded()

    seen = []
    launch(5, 1, 1, 0, params, True, False, None, None, (8, 2, 0), "meta", seen.append,
           lambda m: seen.append(("exit", m)), *kernel_args)
    out["clusters"] = dict(recorded(), hooks=[seen[0], list(seen[1])])

    before = stub.stub_launches()
    launch(0, 1, 1, 0, params, False, False, None, None, (4, 1, 0), None, None, None, *kernel_args)
    out["empty_grid_launches"] = stub.stub_launches() - before

    launch(1, 1, 1, 0, params, False, False, None, None, (4, 16, 0), None, None, None, *kernel_args)
    out["sixteen_ctas"] = recorded()

    errors = {}

    def error_of(name, call):
        try:
            call()
            errors[name] = None
        except Exception as e:  # noqa: BLE001 - the kind and message are the result
            errors[name] = [type(e).__name__, str(e)]

    fixed = (1, 1, 1, 0, params, False, False, None, None, (4, 1, 0), None, None, None)
    error_of("count", lambda: launch(*fixed, *kernel_args[:-1]))
    error_of("i32_range", lambda: launch(*fixed, *kernel_args[:2], 2 ** 31, *kernel_args[3:]))
    error_of("host_pointer", lambda: launch(*fixed, Tensorish(0x10001), *kernel_args[1:]))
    error_of("not_a_pointer", lambda: launch(*fixed, 1.5, *kernel_args[1:]))
    error_of("bad_code", lambda: module.make_launch(b"px"))
    error_of("grid_range", lambda: launch(2 ** 32 + 5, *fixed[1:], *kernel_args))
    error_of("metadata", lambda: launch(*fixed[:9], (4, 1), *fixed[10:], *kernel_args))
    stub.stub_fail_next_launch(700)
    error_of("launch_fails", lambda: launch(*fixed, *kernel_args))
    out["errors"] = errors
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:3])
