build-san/obj/base/crc32c.o: src/base/crc32c.c src/base/crc32c.h
src/base/crc32c.h:
