build-san/obj/io/model_init.o: src/io/model_init.c src/io/model_init.h \
 src/comm/comm.h src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/config/config.h src/compute/backend.h src/base/checked.h \
 src/model/model.h src/compute/mempool.h src/model/model_config.h \
 src/model/params.h src/parallel/optim.h src/parallel/zero.h \
 src/parallel/sched.h src/io/llmc.h
src/io/model_init.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/config/config.h:
src/compute/backend.h:
src/base/checked.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/io/llmc.h:
