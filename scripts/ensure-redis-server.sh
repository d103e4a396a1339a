#!/usr/bin/env bash
# Makes sure a redis-server binary is available for the tests and the demo.
# Uses $QUORUMLOCK_REDIS_SERVER or redis-server on PATH; otherwise installs Debian's redis-server
# package (as root, or through passwordless sudo). With --tls, also openssl, which only the TLS
# tests use (to make their throw-away certificate authority): `make test` asks for it, the demo
# does not.
set -euo pipefail

tls=false
for arg in "$@"; do
  case "$arg" in
    --tls) tls=true ;;
    *) echo "usage: $0 [--tls]" >&2; exit 2 ;;
  esac
done

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
or point QUORUMLOCK_REDIS_SERVER at a redis-server binary (version 6.2 or later).
MSG
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "apt-get not found: install ${missing[*]} with your package manager, or set QUORUMLOCK_REDIS_SERVER." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "Installed: $(redis-server --version 2>/dev/null || true)" >&2
