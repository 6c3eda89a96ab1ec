# Sourced on the GPU machine from the repository root: unpacks .gpu/bundle.tar.xz (see
# make_device_bundle.sh) into /tmp/ridge and points the loader at it; cuBLAS is the machine's.
mkdir -p /tmp/ridge && tar -C /tmp/ridge -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=/tmp/ridge/lib:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export RIDGE_TEST_DATA_DIR=$PWD/tests/data
export PATH=/tmp/ridge/bin:$PATH
