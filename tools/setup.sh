#!/usr/bin/env bash
# Installs what kvscope needs on Debian 12. `setup.sh run` = build + the window; `setup.sh test` = also
# everything the test suite uses (PyTorch reference, npm tokenizers, Jinja2 for chat templates,
# clang/libFuzzer, Xvfb).
# As root it runs apt-get; otherwise it lists what is missing and the command to install it.
set -euo pipefail
mode=${1:-run}

run_packages=(build-essential cmake pkg-config libeigen3-dev catch2 libimgui-dev libglfw3-dev libepoxy-dev
              libstb-dev nlohmann-json3-dev fonts-dejavu-core)
test_packages=(python3-torch python3-numpy python3-pil python3-jinja2 clang libclang-rt-14-dev xvfb xauth xdotool imagemagick
               libtsan2   # ThreadSanitizer runtime for GCC 12 (the TSan stage; gcc-12 usually brings it)
               ccache)    # tools/test.sh's compiler cache: a rerun recompiles only what changed
packages=("${run_packages[@]}")
[ "$mode" = test ] && packages+=("${test_packages[@]}")
# Node.js and npm for the tokenizer oracle (npm tiktoken); keep a newer node if one is installed.
if [ "$mode" = test ] && ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "kvscope needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
