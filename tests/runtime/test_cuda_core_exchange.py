"""CUDA-array-interface producers handed to a GPU launch are read by cuda.core's
StridedMemoryView, which performs the stream handshake on the GPU; tmalang's own readers stay
for machines without cuda.core, for what it cannot express, and for the interpreter. DLPack
producers are read by tmalang's reader, which tells them the launch stream itself: through
StridedMemoryView a DLPack launch cost 487 µs against 298 on the H100 (bench/repeat_launch.py).

On CPU the producers are stand-ins: DLPack producers export a NumPy capsule while claiming CUDA
(binding reads only the description), and for the CUDA array interface, whose view asks the
driver which device owns the pointer, cuda.core's driver module is replaced by one that answers
that single question. On the H100 a torch tensor written late on another stream is handed over
as a DLPack-only and as a CUDA-array-interface-only object and must be read after the write,
with no host wait.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import ROOT
from test_dlpack_stream import DLPackOnly   # the same DLPack-only view of a torch tensor
from tmalang.contract import arrays
from tmalang.contract.arrays import array_view
from tmalang.contract.dlpack import _capsule_pointer, _DLTensor
from tmalang.contract.errors import LaunchError
from tmalang.runtime import launch
from tmalang.targets import dtypes

SHAPE = (70, 132)
LAUNCH_STREAM = 0x7F00DEAD      # only ever told to stand-in producers, never given to the driver
CAI_DEVICE = 3                  # what the stand-in driver says owns every pointer


def _cuda_core():
    return pytest.importorskip("cuda.core.utils", reason="cuda.core is not installed")


class Producer:
    """A DLPack producer claiming CUDA device 0, recording the streams it is asked for. Its capsule
    is NumPy's, optionally with the DLTensor's dtype code or byte_offset rewritten, which is how a
    dtype NumPy cannot export (bf16, fp8) is made on a CPU."""

    def __init__(self, array: np.ndarray, code=None, byte_offset=0):
        self.array, self.code, self.byte_offset, self.asked = array, code, byte_offset, []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        self.asked.append(stream)
        capsule = self.array.__dlpack__()
        tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        if self.code is not None:
            tensor.dtype.code, tensor.dtype.bits = self.code
        tensor.byte_offset = self.byte_offset
        return capsule


class CudaArray:
    """A device array seen only through the CUDA array interface."""

    def __init__(self, ptr=0x7F0000000000, shape=SHAPE, typestr="<f4", strides=None, version=3,
                 stream=None, readonly=False):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, readonly), "strides": strides,
            "version": version, "stream": stream,
        }


@pytest.fixture
def spy(monkeypatch):
    """Every StridedMemoryView made by the contract layer, as (protocol, producer, stream_ptr)."""
    real = _cuda_core().StridedMemoryView
    calls = []

    class Spy:
        @classmethod
        def from_dlpack(cls, obj, stream_ptr=None):
            calls.append(("dlpack", obj, stream_ptr))
            return real.from_dlpack(obj, stream_ptr=stream_ptr)

        @classmethod
        def from_cuda_array_interface(cls, obj, stream_ptr=None):
            calls.append(("cai", obj, stream_ptr))
            return real.from_cuda_array_interface(obj, stream_ptr=stream_ptr)

    monkeypatch.setattr(arrays, "StridedMemoryView", Spy)
    return calls


@pytest.fixture
def pointer_driver(monkeypatch):
    """cuda.core's view of a CUDA array interface asks cuPointerGetAttribute for the device; this
    answers CAI_DEVICE with no GPU. Anything else (the event of a stream handshake) would still
    need the real driver, so the CPU tests hand over no producer stream other than the launch's."""
    module = pytest.importorskip("cuda.core._memoryview")
    real = module.driver

    class Driver:
        CUpointer_attribute = real.CUpointer_attribute

        def cuPointerGetAttribute(self, attribute, pointer):
            return real.CUresult.CUDA_SUCCESS, CAI_DEVICE

        def cuCtxGetDevice(self):
            return real.CUresult.CUDA_SUCCESS, CAI_DEVICE

    monkeypatch.setattr(module, "driver", Driver())


@pytest.fixture
def hidden(monkeypatch):
    """cuda.core as if it were not installed."""
    monkeypatch.setattr(arrays, "StridedMemoryView", None)


def _floats(shape=SHAPE):
    return np.random.default_rng(0).standard_normal(shape, dtype=np.float32)


# --- DLPack ---------------------------------------------------------------------------------


def test_a_dlpack_producer_is_read_by_tmalangs_reader_told_the_launch_stream(spy):
    host = _floats()
    producer = Producer(host)
    view = array_view(producer, "x", LAUNCH_STREAM)
    assert spy == [] and producer.asked == [LAUNCH_STREAM]      # cuda.core is installed, and unused
    assert type(view.owner).__name__ == "PyCapsule"
    assert (view.ptr, view.shape, view.strides) == (host.ctypes.data, SHAPE, (528, 4))
    assert (view.dtype, view.device, view.stream) == ("f32", 0, None)


def test_the_default_stream_is_named_as_dlpack_names_it():
    producer = Producer(_floats())
    array_view(producer, "x", 0)
    assert producer.asked == [1]    # 1: the legacy default stream, handle 0


def test_strides_become_bytes_and_byte_offset_is_kept():
    whole = np.arange(48, dtype=np.int16).reshape(6, 8)
    view = array_view(Producer(whole[:, 2:].T, byte_offset=6), "x", LAUNCH_STREAM)
    assert view.ptr == whole[:, 2:].ctypes.data + 6
    assert (view.shape, view.strides, view.dtype) == ((6, 6), (2, 16), "i16")


DLPACK_CASES = [(d.name, d.dlpack) for d in dtypes.DTYPES.values()]


@pytest.mark.parametrize("name, code", DLPACK_CASES, ids=[n for n, _ in DLPACK_CASES])
def test_every_tmalang_dtype_arrives_by_dlpack(name, code):
    same_width = np.dtype(f"u{dtypes.itemsize(name)}")
    view = array_view(Producer(np.zeros((4, 8), same_width), code=code), "x", LAUNCH_STREAM)
    assert view.dtype == name and view.strides == (8 * dtypes.itemsize(name), dtypes.itemsize(name))


def test_a_dtype_tmalang_does_not_know_is_refused():
    with pytest.raises(LaunchError) as info:
        array_view(Producer(np.zeros(8, np.bool_)), "x", LAUNCH_STREAM)
    assert info.value.code == "E203"


def test_a_producer_without_the_stream_argument_is_asked_plainly():
    class Old(Producer):
        def __dlpack__(self):
            self.asked.append("no argument")
            return self.array.__dlpack__()

    producer = Old(_floats())
    view = array_view(producer, "x", LAUNCH_STREAM)
    assert producer.asked == ["no argument"] and view.shape == SHAPE


# --- CUDA array interface -------------------------------------------------------------------


def test_a_cuda_array_interface_producer_is_read_by_cuda_core(spy, pointer_driver):
    producer = CudaArray(typestr="<f2", readonly=True, stream=LAUNCH_STREAM)
    view = array_view(producer, "x", LAUNCH_STREAM)
    assert [(p, s) for p, _, s in spy] == [("cai", LAUNCH_STREAM)]
    assert (view.ptr, view.shape, view.strides) == (0x7F0000000000, SHAPE, (264, 2))
    assert (view.dtype, view.device, view.readonly) == ("f16", CAI_DEVICE, True)
    assert view.stream is None and view.owner.exporting_obj is producer


def test_cuda_array_interface_strides_become_bytes_again(spy, pointer_driver):
    view = array_view(CudaArray(shape=(3, 8), typestr="<i4", strides=(64, 4)), "x", LAUNCH_STREAM)
    assert isinstance(view.owner, _cuda_core().StridedMemoryView)
    assert (view.strides, view.dtype) == ((64, 4), "i32")


def test_version_2_and_unexpressible_layouts_fall_back(spy, pointer_driver):
    old = array_view(CudaArray(version=2), "x", LAUNCH_STREAM)
    odd = array_view(CudaArray(shape=(3, 8), strides=(66, 4)), "x", LAUNCH_STREAM)  # no whole elements
    assert len(spy) == 2 and old.owner is None and odd.owner is None
    assert odd.strides == (66, 4)


def test_a_view_cuda_core_ordered_is_not_waited_for_on_the_host(spy, pointer_driver, monkeypatch):
    waited = []
    monkeypatch.setattr(launch.driver, "synchronize", waited.append)
    ordered = array_view(CudaArray(stream=LAUNCH_STREAM), "x", LAUNCH_STREAM)
    monkeypatch.setattr(arrays, "StridedMemoryView", None)
    unordered = array_view(CudaArray(stream=5), "y", LAUNCH_STREAM)
    launch._wait_for_producers(SimpleNamespace(views={"x": ordered, "y": unordered}), LAUNCH_STREAM)
    assert (ordered.stream, unordered.stream, waited) == (None, 5, [5])


# --- what never goes through cuda.core -----------------------------------------------------


def test_without_cuda_core_tmalangs_readers_answer(hidden):
    producer = Producer(_floats())
    dl = array_view(producer, "x", LAUNCH_STREAM)
    cai = array_view(CudaArray(stream=5), "y", LAUNCH_STREAM)
    assert producer.asked == [LAUNCH_STREAM] and type(dl.owner).__name__ == "PyCapsule"
    assert (dl.dtype, dl.strides, cai.stream, cai.device) == ("f32", (528, 4), 5, None)


def test_numpy_torch_and_the_interpreter_never_use_cuda_core(spy):
    array_view(_floats(), "x", LAUNCH_STREAM)
    torch = pytest.importorskip("torch")
    array_view(torch.zeros(SHAPE), "x", LAUNCH_STREAM)
    producer = Producer(_floats())
    array_view(producer, "x", None)
    array_view(CudaArray(stream=5), "y", None)
    assert spy == [] and producer.asked == [None]


def test_cuda_core_before_1_2_counts_as_absent(monkeypatch):
    core = pytest.importorskip("cuda.core")
    monkeypatch.setattr(arrays, "StridedMemoryView", arrays._UNLOADED)
    monkeypatch.setattr(core, "__version__", "1.1.1")   # DLPack views then lose byte_offset
    assert arrays.strided_memory_view_class() is None
    monkeypatch.setattr(arrays, "StridedMemoryView", arrays._UNLOADED)
    monkeypatch.setattr(core, "__version__", "1.2.2")
    assert arrays.strided_memory_view_class() is _cuda_core().StridedMemoryView


# --- on the H100 ----------------------------------------------------------------------------

SPIN = 200_000_000       # ~0.1 s of GPU time queued before the input is written


class CudaArrayOnly:
    """A torch tensor seen only through the CUDA array interface, v3, naming the stream its
    last write was queued on (torch itself reports v2, without a stream)."""

    def __init__(self, tensor, stream):
        self.__cuda_array_interface__ = dict(
            tensor.__cuda_array_interface__, version=3, stream=stream.cuda_stream
        )


@pytest.fixture(scope="module")
def saxpy():
    import tmalang

    return tmalang.compile_file(ROOT / "examples" / "saxpy.tma")


def _race(saxpy, wrap):
    """Write x late on a writer stream, launch on another with every array wrapped; return
    (whether the writer was still busy when the launch call returned, whether the launch stream
    was, out == 1.5 x + y exactly)."""
    torch = pytest.importorskip("torch")
    x, y = torch.zeros(SHAPE, device="cuda"), torch.randn(SHAPE, device="cuda")
    out, source = torch.full(SHAPE, float("nan"), device="cuda"), torch.randn(SHAPE, device="cuda")
    saxpy(np.float32(1.5), x, y, out)      # module loaded outside the race
    torch.cuda.synchronize()
    writer, launcher = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(writer):        # torch's current stream: the producer's
        torch.cuda._sleep(SPIN)
        x.copy_(source)
        saxpy(np.float32(1.5), *(wrap(t, writer) for t in (x, y, out)), stream=launcher)
        busy = (not writer.query(), not launcher.query())
    torch.cuda.synchronize()
    expected = np.float32(1.5) * source.cpu().numpy() + y.cpu().numpy()
    return busy + (np.array_equal(out.cpu().numpy(), expected),)


@pytest.mark.gpu
def test_on_the_gpu_a_dlpack_producer_is_ordered_without_a_host_wait(saxpy, spy):
    writer_busy, launcher_busy, exact = _race(saxpy, lambda t, s: DLPackOnly(t))
    assert spy == []                                  # tmalang's reader did the handshake
    assert writer_busy and launcher_busy and exact


@pytest.mark.gpu
def test_on_the_gpu_a_cuda_array_interface_producer_is_ordered_without_a_host_wait(saxpy, spy):
    writer_busy, launcher_busy, exact = _race(saxpy, CudaArrayOnly)
    assert [p for p, _, _ in spy] == ["cai"] * 3
    assert writer_busy and launcher_busy and exact   # the launch stream waits on an event, not the host


@pytest.mark.gpu
def test_on_the_gpu_without_cuda_core_the_host_waits_for_a_cuda_array_interface(saxpy, hidden):
    writer_busy, _, exact = _race(saxpy, CudaArrayOnly)
    assert not writer_busy and exact   # tmalang's reader: the launcher synchronized the writer
