build-san/obj/compute/cuda_nocuda.o: src/compute/cuda_nocuda.c \
 src/compute/cuda_api.h src/compute/backend.h src/base/checked.h \
 src/base/common.h src/base/dtype.h
src/compute/cuda_api.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
