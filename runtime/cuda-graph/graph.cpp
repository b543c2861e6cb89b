// A C API over ATen's CUDA graphs, which tch does not expose: capture a step given as a
// callback, replay it, free it. Built by scripts/build-cuda-graph.sh against the CUDA libtorch
// the runtime will run with, and opened by runtime/src/cuda_graph.rs at run time only: the
// runtime itself links the CPU libtorch alone.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdio>
#include <exception>

namespace {

// Makes `later` wait for the work queued on `earlier` so far. (Raw CUDA events: ATen's
// CUDAEvent.h pulls in cuda_fp16.h, whose headers PyTorch's wheels do not bring. The CUDA
// runtime's functions resolve at load time from the libcudart libtorch_cuda.so loaded.)
void order(cudaStream_t earlier, cudaStream_t later) {
  cudaEvent_t event;
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(event, earlier));
  C10_CUDA_CHECK(cudaStreamWaitEvent(later, event, 0));
  C10_CUDA_CHECK(cudaEventDestroy(event));
}

void report(const char* what, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) {
    std::snprintf(err, err_len, "%s", what);
  }
}

}  // namespace

extern "C" {

// Runs `body(ctx)` once eagerly on a side stream (the warm-up PyTorch asks for before a
// capture: lazy initialisations happen there, outside the graph; it is a real step), then
// captures one more call into a new graph without running it. `body` returns 0 on success.
// Capture mode is thread-local: ranks that are threads of one process may use CUDA meanwhile.
// Returns the graph, or null with the reason in `err`.
void* rlc_graph_capture(int device, int (*body)(void*), void* ctx, char* err, size_t err_len) {
  at::cuda::CUDAGraph* graph = nullptr;
  try {
    const auto index = static_cast<c10::DeviceIndex>(device);
    c10::cuda::CUDAGuard device_guard(index);
    const auto caller = c10::cuda::getCurrentCUDAStream(index);
    auto stream = c10::cuda::getStreamFromPool(false, index);
    // The side stream starts after the work queued so far (the prefill, the buffers' contents),
    // and the caller's stream continues after the warm-up: events, not a device-wide sync,
    // which another rank's thread capturing meanwhile would not survive.
    order(caller.stream(), stream.stream());
    int failed = 0;
    {
      c10::cuda::CUDAStreamGuard stream_guard(stream);
      failed = body(ctx);
      if (failed == 0) {
        graph = new at::cuda::CUDAGraph();
        graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        failed = body(ctx) == 0 ? 0 : 2;
        graph->capture_end();
      }
    }
    order(stream.stream(), caller.stream());
    if (failed != 0) {
      delete graph;
      report(failed == 1 ? "the step failed in its warm-up run"
                         : "the step failed while being captured",
             err, err_len);
      return nullptr;
    }
    return graph;
  } catch (const c10::Error& e) {
    delete graph;
    report(e.what_without_backtrace(), err, err_len);
    return nullptr;
  } catch (const std::exception& e) {
    delete graph;
    report(e.what(), err, err_len);
    return nullptr;
  }
}

// Replays a captured graph on the current stream. Returns 0, or 1 with the reason in `err`.
int rlc_graph_replay(void* graph, char* err, size_t err_len) {
  try {
    static_cast<at::cuda::CUDAGraph*>(graph)->replay();
    return 0;
  } catch (const c10::Error& e) {
    report(e.what_without_backtrace(), err, err_len);
    return 1;
  } catch (const std::exception& e) {
    report(e.what(), err, err_len);
    return 1;
  }
}

void rlc_graph_free(void* graph) {
  delete static_cast<at::cuda::CUDAGraph*>(graph);
}

}  // extern "C"
