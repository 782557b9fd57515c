// Small per-sample arrays between the host and the device for the device
// solvers and the device GMRES adjoint (internal; CUDA builds only): uploads
// are staged in the context's pinned memory and stay valid until the next
// Download(), which copies per-sample doubles back and waits for the stream.
// The buffers are context workspace slots, allocated once per context.
//
//   DeviceStaging io(context, {kSlotUpload, kPinnedUpload, bytes}, {kSlotDownload, kPinnedDownload, doubles});
//   const int* d_list = io.Upload(list.data(), list.size());   // for the next kernels
//   SomeKernel(..., d_list, io.results());
//   const double* out = io.Download(count);                     // synchronises
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/solvers/internal/device_staging.h needs libimplicit built with CUDA"
#endif

#include <implicit/core/cuda_device.h>
#include <implicit/core/cuda_kernels.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>

namespace implicit {
namespace cuda {
namespace internal {

class DeviceStaging {
 public:
  // A device workspace slot and a pinned host slot of the context, and how
  // much they hold (bytes for the uploads, doubles for the downloads).
  struct Slots {
    int device, pinned;
    std::size_t size;
  };

  DeviceStaging(Context& context, Slots upload, Slots download)
      : context_(context), upload_bytes_(upload.size) {
    upload_device_ = static_cast<unsigned char*>(context.Workspace(upload.device, upload.size));
    upload_host_ = static_cast<unsigned char*>(context.PinnedWorkspace(upload.pinned, upload.size));
    download_device_ = static_cast<double*>(context.Workspace(download.device, sizeof(double) * download.size));
    download_host_ = static_cast<double*>(context.PinnedWorkspace(download.pinned, sizeof(double) * download.size));
  }

  // Copies `count` host values to the device; valid until the next Download().
  template <typename T>
  T* Upload(const T* host, std::size_t count) {
    const std::size_t bytes = sizeof(T) * count, at = upload_used_;
    if (at + bytes > upload_bytes_) throw std::logic_error("DeviceStaging: upload staging exhausted");
    upload_used_ += (bytes + 15) / 16 * 16;
    void* device = upload_device_ + at;
    if (bytes == 0) return static_cast<T*>(device);
    std::memcpy(upload_host_ + at, host, bytes);
    CheckCall(cudaMemcpyAsync(device, upload_host_ + at, bytes, cudaMemcpyHostToDevice, context_.stream()),
              "upload of per-sample data");
    return static_cast<T*>(device);
  }
  // The device array for per-sample results, and its download (which waits
  // for the stream and frees the upload staging).
  double* results() const { return download_device_; }
  const double* Download(std::size_t count) {
    CheckCall(cudaMemcpyAsync(download_host_, download_device_, sizeof(double) * count, cudaMemcpyDeviceToHost,
                              context_.stream()),
              "download of per-sample scalars");
    context_.Synchronize();
    upload_used_ = 0;
    return download_host_;
  }

 private:
  Context& context_;
  const std::size_t upload_bytes_;
  std::size_t upload_used_ = 0;
  unsigned char *upload_host_ = nullptr, *upload_device_ = nullptr;
  double *download_host_ = nullptr, *download_device_ = nullptr;
};

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
