// Screens image bytes before they reach stb_image. stb decodes any format it
// recognizes, whatever the file is called (PSD, PIC, PNM and HDR as well as
// the PNG, JPEG, BMP, GIF and TGA that ImageFolder reads), and Debian's
// stb_image 2.27 has memory bugs on hostile input: a JPEG Huffman table of
// more than 256 codes overflows stbi__build_huffman's arrays (found by
// fuzz/fuzz_image.cpp; stb 2.28 refuses such tables, as this check does),
// a PNG chunk's claimed length is allocated before it is read, and tables a
// scan uses but no segment defines are read uninitialized.
#pragma once

#include <string>
#include <string_view>

namespace minidl::data {

// Throws minidl::Error naming `name` for the formats ImageFolder does not
// read, JPEG Huffman tables of more than 256 codes, JPEG scans that use a
// Huffman or quantization table defined nowhere before them and, when `whole_file`,
// PNG chunks that run past the end (stb would allocate their claimed size
// first, up to 2 GiB). Otherwise the bytes may be the file's beginning only.
void check_image_bytes(std::string_view bytes, const std::string& name, bool whole_file);

}  // namespace minidl::data
