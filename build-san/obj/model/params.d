build-san/obj/model/params.o: src/model/params.c src/model/params.h \
 src/base/common.h src/model/model_config.h src/base/checked.h
src/model/params.h:
src/base/common.h:
src/model/model_config.h:
src/base/checked.h:
