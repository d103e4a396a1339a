#!/usr/bin/env bash
# Makes sure a redis-server binary is available for the tests and the demo.
# Uses $QUORUMLOCK_REDIS_SERVER or redis-server on PATH; otherwise installs Debian's redis-server
# package (as root, or through passwordless sudo). With --tls, also openssl, which only the TLS
# tests use (to make their throw-away certificate authority). With --faketime, also libfaketime,
# which the testkit preloads into servers whose wall clock a test fakes (the clock nemesis):
# $QUORUMLOCK_LIBFAKETIME, or else the package's path for this architecture. `make test` asks for
# both; the demo for neither.
set -euo pipefail

tls=false
faketime=false
for arg in "$@"; do
  case "$arg" in
    --tls) tls=true ;;
    --faketime) faketime=true ;;
    *) echo "usage: $0 [--tls] [--faketime]" >&2; exit 2 ;;
  esac
done

# Where Debian's libfaketime package puts the library, for this machine's architecture (the
# testkit looks in the same places: quorumlock_testkit::clock::libfaketime).
libfaketime_found() {
  local triplet=""
  case "$(uname -m)" in
    x86_64) triplet=x86_64-linux-gnu ;;
    aarch64 | arm64) triplet=aarch64-linux-gnu ;;
    i?86) triplet=i386-linux-gnu ;;
    armv7l | armv6l) triplet=arm-linux-gnueabihf ;;
    riscv64) triplet=riscv64-linux-gnu ;;
    s390x) triplet=s390x-linux-gnu ;;
    ppc64le) triplet=powerpc64le-linux-gnu ;;
    loongarch64) triplet=loongarch64-linux-gnu ;;
  esac
  local dir
  for dir in ${triplet:+/usr/lib/$triplet} /usr/lib /usr/lib64 /usr/local/lib; do
    [[ -f "$dir/faketime/libfaketime.so.1" ]] && return 0
  done
  return 1
}

missing=()
if [[ -n "${QUORUMLOCK_REDIS_SERVER:-}" ]]; then
  if [[ ! -x "$QUORUMLOCK_REDIS_SERVER" ]]; then
    echo "QUORUMLOCK_REDIS_SERVER=$QUORUMLOCK_REDIS_SERVER is not an executable file" >&2
    exit 1
  fi
elif ! command -v redis-server >/dev/null 2>&1; then
  missing+=(redis-server)
fi
if $tls && ! command -v openssl >/dev/null 2>&1; then
  missing+=(openssl)
fi
if $faketime; then
  if [[ -n "${QUORUMLOCK_LIBFAKETIME:-}" ]]; then
    if [[ ! -f "$QUORUMLOCK_LIBFAKETIME" ]]; then
      echo "QUORUMLOCK_LIBFAKETIME=$QUORUMLOCK_LIBFAKETIME is not a file" >&2
      exit 1
    fi
  elif ! libfaketime_found; then
    missing+=(libfaketime)
  fi
fi

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "Installing ${missing[*]} (Debian packages)..." >&2
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  cat >&2 <<MSG
Cannot install ${missing[*]}: not root and no passwordless sudo.
Install the Debian package(s) yourself:  sudo apt-get install ${missing[*]}
or point QUORUMLOCK_REDIS_SERVER at a redis-server binary (version 6.2 or later), and
QUORUMLOCK_LIBFAKETIME at a libfaketime.so.1.
MSG
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "apt-get not found: install ${missing[*]} with your package manager, or set QUORUMLOCK_REDIS_SERVER (and QUORUMLOCK_LIBFAKETIME)." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "Installed: ${missing[*]}" >&2
if [[ " ${missing[*]} " == *" redis-server "* ]]; then
  echo "$(redis-server --version 2>/dev/null || true)" >&2
fi
