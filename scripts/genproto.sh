#!/usr/bin/env bash
# Regenerates the Go code for every .proto under proto/ with pinned generators
# and Debian's protoc. Run through `make proto`.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

if ! command -v protoc >/dev/null; then
    echo "protoc not found: apt-get install -y protobuf-compiler" >&2
    exit 1
fi
bin="$(pwd)/.tools/bin"
mkdir -p "$bin"
GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
export PATH="$bin:$PATH"

mapfile -t files < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | sort)
protoc -I proto \
    --go_out=. --go_opt=module=github.com/chunkraft/chunkraft \
    --go-grpc_out=. --go-grpc_opt=module=github.com/chunkraft/chunkraft \
    "${files[@]}"
echo "generated ${#files[@]} proto files"
