build-san/obj/compute/backend_cpu_attn.o: src/compute/backend_cpu_attn.c \
 src/compute/backend_cpu_internal.h src/compute/backend.h \
 src/base/checked.h src/base/common.h src/base/dtype.h \
 /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
 /usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h
src/compute/backend_cpu_internal.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h:
/usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h:
