"""CPU-only tests of the runtime: argument binding, layouts, grids, parameters, staging, cache.

Nothing here needs a GPU; the driver is either absent (and must be reported as LaunchError) or
replaced by a fake that treats host memory as device memory.
"""

from __future__ import annotations

import ctypes
import sys

import ml_dtypes
import numpy as np
import pytest

from tmalang.contract.manifest import (
    DimParam, GridSpec, Manifest, ScalarArg, ScalarParam, TensorArg, TensorMapParam,
)
from tmalang.caches.disk import DiskCache
from tmalang.runtime import Launcher, LaunchError, bind
from tmalang.runtime import driver
from tmalang.contract.arrays import array_view
from tmalang.runtime.launch import grid_size
from tmalang.runtime.params import pack_params
from tmalang.runtime.staging import Staging
from tmalang.runtime.tensormap import tensor_map_fields


def scale_manifest(grid_kind: str = "tiles", cluster=(1, 1, 1)) -> Manifest:
    """dst[M, N] = alpha * src[M, N], tiled 64 x 32."""
    return Manifest(
        kernel="scale",
        arch="sm_90a",
        args=(
            TensorArg("src", "f32", ("M", "N"), written=False, read=True),
            TensorArg("dst", "f32", ("M", "N"), written=True, read=False),
            ScalarArg("alpha", "f32"),
        ),
        ptx_params=(
            TensorMapParam("src_box", "src", "f32", (64, 32), (1, 1), "none", "zero"),
            TensorMapParam("dst_box", "dst", "f32", (64, 32), (1, 1), "128B", "nan", "256B"),
            DimParam("M"),
            DimParam("N"),
            ScalarParam("alpha", "f32"),
        ),
        block_threads=128,
        smem_bytes=8192,
        grid=GridSpec(grid_kind, (("M", 64), ("N", 32))),
        cluster=cluster,
    )


def matrices(m: int = 100, n: int = 36, dtype=np.float32):
    return np.ones((m, n), dtype), np.zeros((m, n), dtype)


def launch_error(manifest, args, dims=None) -> LaunchError:
    with pytest.raises(LaunchError) as info:
        bind(manifest, args, dims)
    return info.value


class FakeCudaArray:
    """A device array as CuPy/Numba would expose it, minus the GPU."""

    def __init__(self, ptr, shape, typestr="<f4", strides=None, version=3):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, False),
            "strides": strides, "version": version,
        }


class FakeDLPack:
    """A CUDA DLPack producer whose capsule is really NumPy's (same struct, host memory)."""

    def __init__(self, array: np.ndarray, device: int):
        self.array, self.device = array, device

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self):
        return self.array.__dlpack__()


# --- binding ---------------------------------------------------------------------------------


def test_binds_symbols_views_and_scalars():
    src, dst = matrices(100, 36)
    binding = bind(scale_manifest(), (src, dst, 2))
    assert binding.symbols == {"M": 100, "N": 36}
    assert binding.views["dst"].strides == (144, 4)
    assert binding.views["src"].dtype == "f32" and binding.views["src"].on_host
    assert binding.scalars["alpha"] == 2.0 and type(binding.scalars["alpha"]) is np.float32


def test_wrong_argument_count():
    src, dst = matrices()
    err = launch_error(scale_manifest(), (src, dst))
    assert err.code == "E201"
    assert "expects 3 arguments (src, dst, alpha), got 2" in err.message


def test_wrong_dtype():
    src, dst = matrices()
    err = launch_error(scale_manifest(), (src, dst.astype(np.float16), 1.0))
    assert err.code == "E203"
    assert "argument 'dst': expected dtype f32, got float16" in err.message


def test_unsupported_dtype_lists_supported_ones():
    err = launch_error(scale_manifest(), (np.ones((4, 4), np.complex64), matrices()[1], 1.0))
    assert err.code == "E203" and "complex64 is not supported" in err.message
    assert "bf16" in err.notes[0]


def test_wrong_rank():
    src, dst = matrices()
    err = launch_error(scale_manifest(), (src, dst[0], 1.0))
    assert err.code == "E204"
    assert "argument 'dst': expected rank 2 (shape (M, N)), got rank 1" in err.message


def test_inconsistent_symbol():
    src, _ = matrices(1000, 36)
    err = launch_error(scale_manifest(), (src, np.zeros((999, 36), np.float32), 1.0))
    assert err.code == "E205"
    assert "argument 'dst': dim 0 is bound to M=1000 by 'src' but is 999 here" in err.message


def test_explicit_dims_bind_first_and_must_agree():
    src, dst = matrices(100, 36)
    assert bind(scale_manifest(), (src, dst, 1.0), dims={"M": 100}).symbols["M"] == 100
    err = launch_error(scale_manifest(), (src, dst, 1.0), dims={"N": 40})
    assert err.code == "E205"
    assert "argument 'src': dim 1 is bound to N=40 by dims= but is 36 here" in err.message


def test_explicit_dims_unknown_symbol():
    err = launch_error(scale_manifest(), (*matrices(), 1.0), dims={"K": 8})
    assert err.code == "E212" and "dims names 'K'" in err.message and "M, N" in err.message


def test_literal_dim_must_match():
    m = scale_manifest()
    fixed = TensorArg("src", "f32", ("M", 64), written=False, read=True)
    m = Manifest(m.kernel, m.arch, (fixed, *m.args[1:]), m.ptx_params, m.block_threads,
                 m.smem_bytes, m.grid)
    err = launch_error(m, (*matrices(8, 60), 1.0))
    assert err.code == "E205" and "dim 1 must be 64 (fixed by the kernel), got 60" in err.message


def test_innermost_dimension_must_be_contiguous():
    wide = np.zeros((100, 72), np.float32)
    err = launch_error(scale_manifest(), (wide[:, ::2], wide[:, ::2], 1.0))
    assert err.code == "E207"
    assert "argument 'src': innermost dimension must be contiguous (stride 1 element)" in err.message


def test_outer_stride_must_be_multiple_of_16_bytes():
    padded = np.zeros((10, 33), np.float32)[:, :32]      # rows 132 bytes apart
    err = launch_error(scale_manifest(), (padded, np.zeros((10, 32), np.float32), 1.0))
    assert err.code == "E207"
    assert "argument 'src': stride of dim 0 is 132 bytes; TMA needs a multiple of 16" in err.message
    assert "multiple of 4 elements" in err.notes[0]


def test_padded_slice_with_aligned_rows_is_accepted():
    padded = np.zeros((10, 36), np.float32)[:, :28]       # rows 144 bytes apart
    binding = bind(scale_manifest(), (padded, np.zeros((10, 28), np.float32), 1.0))
    assert binding.views["src"].strides == (144, 4) and binding.symbols["N"] == 28


def test_stride_of_extent_one_dim_is_ignored():
    one_row = FakeCudaArray(0x1000, (1, 36), strides=(4, 4))   # torch may report such strides
    binding = bind(scale_manifest(), (one_row, one_row, 1.0))
    assert binding.views["src"].strides == (144, 4)


def test_empty_dimension():
    src, dst = matrices(0, 36)
    err = launch_error(scale_manifest(), (src, dst, 1.0))
    assert err.code == "E206" and "dim 0 is 0: empty tensors cannot be launched" in err.message


def test_array_passed_for_scalar():
    src, dst = matrices()
    err = launch_error(scale_manifest(), (src, dst, np.ones(3, np.float32)))
    assert err.code == "E202" and "argument 'alpha': expected a scalar f32, got ndarray" in err.message


def test_scalar_passed_for_tensor():
    _, dst = matrices()
    err = launch_error(scale_manifest(), (1.5, dst, 1.0))
    assert err.code == "E202" and "argument 'src': expected an array, got float" in err.message


def test_scalar_value_must_fit_its_dtype():
    m = scale_manifest()
    m = Manifest(m.kernel, m.arch, (*m.args[:2], ScalarArg("alpha", "i32")), m.ptx_params,
                 m.block_threads, m.smem_bytes, m.grid)
    assert bind(m, (*matrices(), -5)).scalars["alpha"].dtype == np.int32
    err = launch_error(m, (*matrices(), 2**40))
    assert err.code == "E213" and "does not fit in i32" in err.message
    assert launch_error(m, (*matrices(), 2.5)).code == "E202"


def test_read_only_output_is_refused():
    src, dst = matrices()
    dst.flags.writeable = False
    err = launch_error(scale_manifest(), (src, dst, 1.0))
    assert err.code == "E202" and "'dst' is read-only but the kernel writes it" in err.message


def test_device_base_address_alignment():
    good = FakeCudaArray(0x7F0000001000, (8, 32))
    bad = FakeCudaArray(0x7F0000001004, (8, 32))
    err = launch_error(scale_manifest(), (good, bad, 1.0))
    assert err.code == "E208" and "base address 0x7f0000001004 is not 16-byte aligned" in err.message


def test_arrays_on_different_devices():
    src, dst = matrices(8, 32)
    err = launch_error(scale_manifest(), (FakeDLPack(src, 0), FakeDLPack(dst, 1), 1.0))
    assert err.code == "E209" and "'src' on cuda:0, 'dst' on cuda:1" in err.message


# --- array adapters --------------------------------------------------------------------------


def test_cuda_array_interface_without_strides_is_c_contiguous():
    view = array_view(FakeCudaArray(0x2000, (3, 5, 8), "<f2", strides=None), "x")
    assert (view.ptr, view.shape, view.strides, view.dtype) == (0x2000, (3, 5, 8), (80, 16, 2), "f16")
    assert view.device is None and not view.on_host
    strided = array_view(FakeCudaArray(0x2000, (3, 8), "<i4", strides=(64, 4)), "x")
    assert strided.strides == (64, 4) and strided.dtype == "i32"


def test_cuda_array_interface_raw_void_type_is_refused():
    with pytest.raises(LaunchError) as info:
        array_view(FakeCudaArray(0x2000, (4, 8), "<V2"), "x")
    assert info.value.code == "E203" and "dtype <V2 is not supported" in info.value.message


def test_dlpack_capsule_is_read():
    host = np.arange(48, dtype=np.int16).reshape(6, 8)[:, 2:]
    view = array_view(FakeDLPack(host, 3), "x")
    assert view.ptr == host.ctypes.data and view.device == 3 and not view.on_host
    assert (view.shape, view.strides, view.dtype) == ((6, 6), (16, 2), "i16")


def test_ml_dtypes_host_arrays():
    assert array_view(np.zeros((2, 8), ml_dtypes.bfloat16), "x").dtype == "bf16"
    assert array_view(np.zeros((2, 16), ml_dtypes.float8_e4m3fn), "x").dtype == "f8e4m3"


# --- grid, tensor maps, parameters -----------------------------------------------------------


def test_tile_count_rounds_partial_tiles_up():
    assert bind(scale_manifest(), (*matrices(100, 36), 1.0)).tile_count() == 2 * 2
    assert bind(scale_manifest(), (*matrices(128, 32), 1.0)).tile_count() == 2 * 1
    assert bind(scale_manifest(), (*matrices(1, 1), 1.0)).tile_count() == 1
    m = scale_manifest()
    m = Manifest(m.kernel, m.arch, m.args, m.ptx_params, m.block_threads, m.smem_bytes,
                 GridSpec("tiles", (("M", 64), (100, 32), ("N", 7))))
    assert bind(m, (*matrices(65, 36), 1.0)).tile_count() == 2 * 4 * 6


def test_grid_size_kinds_and_clusters():
    assert grid_size("tiles", 10, (1, 1, 1), lambda: None) == 10
    assert grid_size("persistent", 1000, (1, 1, 1), lambda: 264) == 264
    assert grid_size("persistent", 7, (1, 1, 1), lambda: 264) == 7
    assert grid_size("persistent", 7, (2, 1, 1), lambda: 264) == 8
    with pytest.raises(LaunchError) as info:
        grid_size("tiles", 7, (2, 1, 1), lambda: None)
    assert info.value.code == "E215" and "not a multiple of the cluster size 2" in info.value.message
    with pytest.raises(LaunchError) as info:
        grid_size("persistent", 7, (1, 1, 1), lambda: 0)
    assert info.value.code == "E215"


def test_tensor_map_fields_are_innermost_first():
    src = np.zeros((5, 100, 40), np.float32)[:, :, :36]
    m = scale_manifest()
    param = TensorMapParam("b", "src", "f32", (2, 64, 32), (1, 2, 1), "128B", "nan", "256B")
    view = array_view(src, "src")
    fields = tensor_map_fields(param, view, 0xABC00)
    assert fields.rank == 3 and fields.address == 0xABC00
    assert fields.global_dim == (36, 100, 5)
    assert fields.global_strides == (160, 16000)
    assert fields.box_dim == (32, 64, 2) and fields.element_strides == (1, 2, 1)
    assert (fields.data_type, fields.swizzle) == ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "CU_TENSOR_MAP_SWIZZLE_128B")
    assert fields.l2_promotion == "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
    assert fields.oob_fill == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"
    assert tensor_map_fields(m.ptx_params[0], view, 0).oob_fill == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"


def test_kernel_params_follow_ptx_order_and_alignment():
    binding = bind(scale_manifest(), (*matrices(100, 36), 0.5))
    params = pack_params(binding, lambda p: p.box.encode().ljust(128, b"\0"))
    assert len(params) == 5
    assert params.value(0).startswith(b"src_box") and params.value(1).startswith(b"dst_box")
    assert params.pointer(0) % 64 == 0 and params.pointer(1) % 64 == 0
    assert params.value(2) == (100).to_bytes(4, "little")
    assert params.value(3) == (36).to_bytes(4, "little")
    assert params.value(4) == np.float32(0.5).tobytes()
    pointers = (ctypes.c_void_p * 5).from_address(params.address)
    assert [pointers[i] for i in range(5)] == [params.pointer(i) for i in range(5)]


# --- staging with a fake driver whose "device memory" is host memory -------------------------


class HostMemoryDriver:
    def __init__(self):
        self.buffers = {}

    def alloc(self, nbytes):
        buffer = ctypes.create_string_buffer(nbytes)
        self.buffers[ctypes.addressof(buffer)] = buffer
        return ctypes.addressof(buffer)

    def free(self, ptr):
        del self.buffers[ptr]

    def upload(self, dst, src, nbytes, stream):
        ctypes.memmove(dst, src, nbytes)

    def download(self, dst, src, nbytes, stream):
        ctypes.memmove(dst, src, nbytes)

    def synchronize(self, stream):
        pass


def test_staging_copies_written_views_back_without_touching_gaps(monkeypatch):
    fake = HostMemoryDriver()
    for name in ("alloc", "free", "upload", "download", "synchronize"):
        monkeypatch.setattr(driver, name, getattr(fake, name))
    storage = np.full((4, 12), -1.0, np.float32)
    src, dst = np.arange(32, dtype=np.float32).reshape(4, 8), storage[:, :8]
    binding = bind(scale_manifest(), (src, dst, 1.0))
    with Staging(binding, stream=0) as staging:
        staging.upload()
        device_src = np.ctypeslib.as_array(
            (ctypes.c_float * 32).from_address(staging.device_ptr("src")))
        device_dst = (ctypes.c_float * 44).from_address(staging.device_ptr("dst"))
        for i in range(4):                      # the "kernel": dst = 2 * src
            for j in range(8):
                device_dst[i * 12 + j] = 2 * device_src[i * 8 + j]
            if i < 3:
                device_dst[i * 12 + 8] = 99.0  # a gap byte the kernel must not leak back
        staging.finish()
    assert fake.buffers == {}
    np.testing.assert_array_equal(dst, 2 * src)
    assert (storage[:, 8:] == -1.0).all()


# --- no driver -------------------------------------------------------------------------------


@pytest.fixture
def fresh_driver_gate():
    driver.api.cache_clear()
    driver.init.cache_clear()
    yield
    driver.api.cache_clear()
    driver.init.cache_clear()


def test_launch_without_gpu_raises_launch_error():
    """On a GPU-less machine the driver is missing (E210); on a GPU machine the empty cubin
    is rejected (E211). Either way it is a LaunchError, never an ImportError/OSError."""
    launcher = Launcher(scale_manifest(), b"")
    with pytest.raises(LaunchError) as info:
        launcher(*matrices(), 1.0)
    assert info.value.code in ("E210", "E211")


def test_missing_driver_library_is_reported(monkeypatch, fresh_driver_gate):
    from cuda.bindings import driver as cuda_driver

    def no_library():
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found ...')

    monkeypatch.setattr(cuda_driver, "cuDriverGetVersion", no_library)
    with pytest.raises(LaunchError) as info:
        Launcher(scale_manifest(), b"")(*matrices(), 1.0)
    assert info.value.code == "E210" and info.value.message.startswith("no CUDA driver found")


def test_missing_bindings_are_reported(monkeypatch, fresh_driver_gate):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(LaunchError) as info:
        Launcher(scale_manifest(), b"")(*matrices(), 1.0)
    assert info.value.code == "E210" and "no CUDA driver bindings" in info.value.message


def test_argument_errors_come_before_driver_errors():
    with pytest.raises(LaunchError) as info:
        Launcher(scale_manifest(), b"")(*matrices())
    assert info.value.code == "E201"


# --- disk cache ------------------------------------------------------------------------------


def test_cache_key_is_canonical():
    a = DiskCache.key("src", {"arch": "sm_90a", "opt": 2}, {"tmalang": "0.1"})
    b = DiskCache.key("src", {"opt": 2, "arch": "sm_90a"}, {"tmalang": "0.1"})
    assert a == b and len(a) == 64
    assert a != DiskCache.key("src ", {"arch": "sm_90a", "opt": 2}, {"tmalang": "0.1"})


def test_cache_round_trip(tmp_path):
    cache = DiskCache(tmp_path)
    key = DiskCache.key("kernel", {}, {})
    assert cache.get(key) is None
    cache.put(key, {"kernel.cubin": b"\x7fELF...", "manifest.json": b"{}"})
    assert cache.get(key) == {"kernel.cubin": b"\x7fELF...", "manifest.json": b"{}"}
    assert [p.name for p in tmp_path.rglob(".*")] == []     # no temporaries left behind


def test_cache_corrupted_entry_is_a_miss_and_is_replaced(tmp_path):
    cache = DiskCache(tmp_path)
    key = DiskCache.key("kernel", {}, {})
    cache.put(key, {"kernel.cubin": b"good"})
    (cubin,) = tmp_path.rglob("kernel.cubin")
    cubin.write_bytes(b"goo")
    assert cache.get(key) is None
    cache.put(key, {"kernel.cubin": b"good"})
    assert cache.get(key) == {"kernel.cubin": b"good"}


def test_cache_disabled_by_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE", "0")
    cache = DiskCache(tmp_path)
    key = DiskCache.key("kernel", {}, {})
    cache.put(key, {"kernel.cubin": b"x"})
    assert cache.get(key) is None and list(tmp_path.iterdir()) == []


def test_cache_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert DiskCache().root == tmp_path / "elsewhere"


def test_cache_dir_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("TMALANG_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert DiskCache().root == tmp_path / "xdg" / "tmalang"
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(tmp_path / "mine"))   # the tmalang variable wins
    assert DiskCache().root == tmp_path / "mine"


# --- robustness: 32-bit index math, aliasing outputs, masks, repeat launches ---------------------


@pytest.mark.parametrize("value", [2**31, 2**32 - 1])
def test_dims_from_2_31_are_e206(value):
    src, dst = matrices()
    err = launch_error(scale_manifest(), (src, dst, 1.0), dims={"M": value})
    assert err.code == "E206" and "dims must be < 2**31" in err.message


def test_a_dim_just_below_2_31_binds():
    from numpy.lib.stride_tricks import as_strided

    src = as_strided(np.zeros(64, np.float32), (2**31 - 1, 4), (16, 4), writeable=False)  # not allocated
    assert array_view(src, "src").shape[0] == 2**31 - 1
    from tmalang.contract.binding import check_extent

    check_extent(2**31 - 1, "dim")


def test_tiles_beyond_the_32_bit_tile_index_are_e206():
    from tmalang.contract.binding import _check_tile_count

    manifest = scale_manifest()                                   # boxes of 64 x 32
    _check_tile_count(manifest, {"M": 64 * 2**15, "N": 32 * (2**16 - 1)})
    with pytest.raises(LaunchError) as info:
        _check_tile_count(manifest, {"M": 64 * 2**15, "N": 32 * 2**16})
    assert info.value.code == "E206" and "2147483648 tiles" in info.value.message


def test_written_arrays_with_overlapping_rows_are_e216():
    from numpy.lib.stride_tricks import as_strided

    base = np.zeros(64 * 4 + 32, np.float32)
    rows = as_strided(base, (64, 32), (16, 4))                    # row i starts 4 elements after row i-1
    src, _ = matrices(64, 32)
    err = launch_error(scale_manifest(), (src, rows, 1.0))
    assert err.code == "E216" and "argument 'dst'" in err.message
    readonly = as_strided(base, (64, 32), (16, 4), writeable=False)
    bind(scale_manifest(), (readonly, np.zeros((64, 32), np.float32), 1.0))   # reading aliases is fine


def test_broadcast_output_rows_are_e216():
    from numpy.lib.stride_tricks import as_strided

    base = np.zeros(32, np.float32)
    src, _ = matrices(64, 32)
    err = launch_error(scale_manifest(), (src, as_strided(base, (64, 32), (0, 4)), 1.0))
    assert err.code in ("E207", "E216")      # a zero stride is refused by the layout rules first


def test_numpy_masked_arrays_are_e202():
    src, dst = matrices()
    masked = np.ma.masked_array(src, mask=src > 0)
    err = launch_error(scale_manifest(), (masked, dst, 1.0))
    assert err.code == "E202" and "masked arrays are not supported" in err.message
    err = launch_error(scale_manifest(), (src, np.ma.masked_array(dst), 1.0))
    assert err.code == "E202"


@pytest.mark.parametrize("zero, minus_zero", [(0.0, -0.0), (np.float32(0.0), np.float32(-0.0))])
def test_repeat_launch_signature_tells_zero_from_minus_zero(zero, minus_zero):
    from tmalang.runtime.launch import _device_signature

    assert _device_signature((zero,), None, None) != _device_signature((minus_zero,), None, None)
    assert _device_signature((zero,), None, None) == _device_signature((zero,), None, None)


def test_repeat_launch_signature_of_bad_dims_defers_to_bind():
    from tmalang.runtime.launch import _device_signature

    assert _device_signature((1.0,), ["M", 4], None) is None
    assert _device_signature((1.0,), {1: 2, "M": 3}, None) is not None


# --- cache: repair, untrusted indexes, eviction -------------------------------------------------


def _entry(cache: DiskCache, key: str):
    return cache.root / key[:2] / key


def test_cache_empty_index_is_a_miss_and_is_repaired(tmp_path):
    cache, key = DiskCache(tmp_path), DiskCache.key("k", {}, {})
    cache.put(key, {"kernel.cubin": b"good"})
    (_entry(cache, key) / "index.json").write_text("{}")
    assert cache.get(key) is None
    cache.put(key, {"kernel.cubin": b"good"})
    assert cache.get(key) == {"kernel.cubin": b"good"}


@pytest.mark.parametrize("blocker", ["file", "symlink"])
def test_cache_entry_path_taken_by_a_file_is_repaired(tmp_path, blocker):
    cache, key = DiskCache(tmp_path), DiskCache.key("k", {}, {})
    entry = _entry(cache, key)
    entry.parent.mkdir(parents=True)
    if blocker == "file":
        entry.write_bytes(b"junk")
    else:
        entry.symlink_to(tmp_path / "elsewhere")
    assert cache.get(key) is None
    cache.put(key, {"kernel.cubin": b"good"})
    assert cache.get(key) == {"kernel.cubin": b"good"} and entry.is_dir() and not entry.is_symlink()


def _forge_index(cache: DiskCache, key: str, names: dict) -> None:
    import json

    (_entry(cache, key) / "index.json").write_text(json.dumps(names))


def test_cache_index_naming_files_outside_the_entry_is_a_miss(tmp_path):
    import hashlib

    cache, key = DiskCache(tmp_path / "cache"), DiskCache.key("k", {}, {})
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside")
    cache.put(key, {"kernel.cubin": b"good"})
    digest = hashlib.sha256(b"outside").hexdigest()
    for name in ["../../../secret", str(secret), ".hidden", "index.json"]:
        _forge_index(cache, key, {name: digest})
        assert cache.get(key) is None
    (_entry(cache, key) / "link").symlink_to(secret)
    _forge_index(cache, key, {"link": digest})
    assert cache.get(key) is None


def test_cache_fifo_in_an_entry_does_not_block_the_reader(tmp_path):
    import os
    import threading

    cache, key = DiskCache(tmp_path), DiskCache.key("k", {}, {})
    cache.put(key, {"kernel.cubin": b"good"})
    cubin = _entry(cache, key) / "kernel.cubin"
    cubin.unlink()
    os.mkfifo(cubin)
    result = []
    reader = threading.Thread(target=lambda: result.append(cache.get(key)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive() and result == [None]
    cache.put(key, {"kernel.cubin": b"good"})
    assert cache.get(key) == {"kernel.cubin": b"good"}


def test_cache_evicts_least_recently_used_entries(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("TMALANG_CACHE_MAX_ENTRIES", "2")
    cache = DiskCache(tmp_path)
    keys = [DiskCache.key(str(i), {}, {}) for i in range(3)]
    for age, key in zip((300, 200), keys):
        cache.put(key, {"kernel.cubin": key.encode()})
        os.utime(_entry(cache, key), (1e9 - age, 1e9 - age))   # entry 0 is the oldest ...
    assert cache.get(keys[0]) is not None                       # ... until this hit refreshes it
    cache.put(keys[2], {"kernel.cubin": b"new"})
    assert [cache.get(k) is not None for k in keys] == [True, False, True]


def test_cache_evicts_by_size(tmp_path, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE_MAX_BYTES", "3000")
    cache = DiskCache(tmp_path)
    keys = [DiskCache.key(str(i), {}, {}) for i in range(4)]
    for key in keys:
        cache.put(key, {"kernel.cubin": bytes(1000)})
    kept = [k for k in keys if cache.get(k) is not None]
    assert keys[-1] in kept and 1 <= len(kept) <= 2
