#include "trainer/model/cuda_kernels.h"

namespace zlm::trainer {

bool cuda_kernels_built() {
#ifdef ZLM_HAVE_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

}  // namespace zlm::trainer
