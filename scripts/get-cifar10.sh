#!/usr/bin/env bash
# Downloads CIFAR-10's official binary release into data/cifar-10-batches-bin
# (data_batch_1..5.bin, test_batch.bin, batches.meta.txt), after checking the
# archive's MD5 against the one published on https://www.cs.toronto.edu/~kriz/cifar.html.
# Exits non-zero with a clear message when it cannot (no network, bad checksum).
# usage: scripts/get-cifar10.sh [DEST_DIR]   (default: data)
set -euo pipefail
dest=${1:-data}
url=https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
md5=c32a1d4ab5d03f1284b67883e8d87530

if [ -f "$dest/cifar-10-batches-bin/data_batch_1.bin" ]; then
  echo "get-cifar10: $dest/cifar-10-batches-bin already present"
  exit 0
fi
mkdir -p "$dest"
archive="$dest/cifar-10-binary.tar.gz"
partial="$archive.part"
echo "get-cifar10: downloading $url (162 MB)"
if command -v curl >/dev/null; then
  fetch=(curl -fsSL --connect-timeout 20 --max-time 1800 -o "$partial" "$url")
elif command -v wget >/dev/null; then
  fetch=(wget -q --timeout=20 -O "$partial" "$url")
else
  echo "get-cifar10: neither curl nor wget is installed" >&2
  exit 1
fi
if ! "${fetch[@]}"; then
  rm -f "$partial"
  echo "get-cifar10: could not download $url (no network?)." >&2
  echo "get-cifar10: put the extracted cifar-10-batches-bin folder in $dest/ by hand to use CIFAR-10." >&2
  exit 1
fi
got=$(md5sum "$partial" | cut -d' ' -f1)
if [ "$got" != "$md5" ]; then
  rm -f "$partial"
  echo "get-cifar10: checksum mismatch for $url: got $got, expected $md5 (truncated or altered download)" >&2
  exit 1
fi
mv "$partial" "$archive"
tar -xzf "$archive" -C "$dest"
rm -f "$archive"
echo "get-cifar10: CIFAR-10 is in $dest/cifar-10-batches-bin"
