build-san/obj/compute/backend_select.o: src/compute/backend_select.c \
 src/compute/backend_select.h src/compute/backend.h src/base/checked.h \
 src/base/common.h src/base/dtype.h src/compute/cuda_api.h
src/compute/backend_select.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
src/compute/cuda_api.h:
