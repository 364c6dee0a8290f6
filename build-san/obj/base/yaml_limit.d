build-san/obj/base/yaml_limit.o: src/base/yaml_limit.c \
 src/base/yaml_limit.h src/base/common.h
src/base/yaml_limit.h:
src/base/common.h:
