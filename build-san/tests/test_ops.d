build-san/tests/test_ops: tests/test_ops.c src/compute/backend.h \
 src/base/common.h src/base/dtype.h src/compute/backend_cpu_internal.h \
 /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
 /usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h \
 tests/op_cases.h tests/op_harness.h tests/ops_ref.h src/base/bf16.h \
 tests/testlib.h tests/op_families.h
src/compute/backend.h:
src/base/common.h:
src/base/dtype.h:
src/compute/backend_cpu_internal.h:
/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h:
/usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h:
tests/op_cases.h:
tests/op_harness.h:
tests/ops_ref.h:
src/base/bf16.h:
tests/testlib.h:
tests/op_families.h:
