build-san/obj/io/export.o: src/io/export.c src/io/export.h \
 src/base/common.h src/io/checkpoint.h src/compute/backend.h \
 src/base/checked.h src/base/dtype.h src/comm/comm.h src/comm/launch.h \
 src/config/config.h src/model/model.h src/compute/mempool.h \
 src/model/model_config.h src/model/params.h src/parallel/optim.h \
 src/parallel/zero.h src/parallel/sched.h src/io/llmc.h
src/io/export.h:
src/base/common.h:
src/io/checkpoint.h:
src/compute/backend.h:
src/base/checked.h:
src/base/dtype.h:
src/comm/comm.h:
src/comm/launch.h:
src/config/config.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/io/llmc.h:
