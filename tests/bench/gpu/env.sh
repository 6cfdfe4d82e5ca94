# Sourced by the GPU kit's scripts (run_gpu.sh, session.sh) from the source root:
# START (the script's start, for its budget), OUT (where its results go: the
# device tool's $OUT, else gpu-out), PY, LD_LIBRARY_PATH with the GPU machine's
# torch and NVIDIA libraries (the carried binaries have no RUNPATH), and
# llmc_make, llm.c's build for Hopper.
START=$SECONDS
OUT=${OUT:-$PWD/gpu-out}
if [[ -z "${PY:-}" ]]; then PY=python3; [[ -x .venv/bin/python ]] && PY=.venv/bin/python; fi
libs=$($PY - <<'PYEOF' 2>/dev/null
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print(":".join([os.path.join(os.path.dirname(torch.__file__), "lib")] + sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib"))) +
               sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "lib")))))
PYEOF
)
export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# llmc_make LIMIT: train_gpt2cu in the current directory (a copy of llm.c), without cuDNN or MPI.
# CUDA 13's cudaMemAdvise takes a cudaMemLocation where llm.c passes a device number (the host's).
llmc_make() {
  if PATH=$PATH:/usr/local/cuda/bin nvcc --version | grep -q 'release 1[3-9]'; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      llmc/cuda_utils.cuh
  fi
  PATH=$PATH:/usr/local/cuda/bin timeout "$1" make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 GPU_COMPUTE_CAPABILITY=90
}
