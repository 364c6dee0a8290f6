build-san/obj/app/main.o: src/app/main.c src/compute/backend.h \
 src/base/common.h src/base/dtype.h src/app/commtest.h \
 src/config/config.h src/comm/comm.h src/comm/launch.h src/model/model.h \
 src/compute/mempool.h src/model/model_config.h src/model/params.h \
 src/parallel/optim.h src/parallel/zero.h src/parallel/sched.h \
 src/config/config_layout.h src/comm/mesh.h src/io/export.h src/io/llmc.h \
 src/io/metrics.h src/plan/plan.h src/app/sample.h src/app/train.h
src/compute/backend.h:
src/base/common.h:
src/base/dtype.h:
src/app/commtest.h:
src/config/config.h:
src/comm/comm.h:
src/comm/launch.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/config/config_layout.h:
src/comm/mesh.h:
src/io/export.h:
src/io/llmc.h:
src/io/metrics.h:
src/plan/plan.h:
src/app/sample.h:
src/app/train.h:
