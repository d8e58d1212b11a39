# Sourced by bench/run.sh and scripts/image-symbol-order.sh: builds the
# operator binary exactly as the Dockerfile's builder stage does (keep the
# two in step): no local mode, cargo profile `image` (whole-program,
# size-optimized; ~6-8 min on 2 cores), and on x86_64, where rustc links
# with LLD, the functions it runs from start-up to idle placed first and
# together (crates/dkv-operator/image-symbol-order.txt, made by
# scripts/image-symbol-order.sh), which cuts its idle resident memory in
# about half.
build_image_binary() {
  local flags=""
  if [ "$(uname -m)" = x86_64 ]; then
    flags="-C link-arg=-Wl,--symbol-ordering-file=$PWD/crates/dkv-operator/image-symbol-order.txt -C link-arg=-Wl,--no-warn-symbol-ordering"
  fi
  RUSTFLAGS="$flags" cargo build --profile image --locked -p dkv-operator --no-default-features --bin dkv
}
