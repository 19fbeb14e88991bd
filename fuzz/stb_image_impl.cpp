// The fuzz build compiles stb_image itself, from the same Debian header
// (libstb-dev) the normal build links as libstb: libFuzzer then sees stb's
// branches and ASan/UBSan check its memory accesses, which they cannot do in
// the prebuilt library.
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
