// The format screen and the JPEG marker walk of check_image_bytes.
#include "minidl/data/image_check.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "minidl/core/check.h"

namespace minidl::data {

namespace {

bool starts_with(std::string_view b, std::string_view magic) { return b.substr(0, magic.size()) == magic; }

uint8_t at(std::string_view b, size_t i) { return static_cast<uint8_t>(b[i]); }

// Every DHT segment of a JPEG: each table's 16 code counts must add up to at
// most 256; every Huffman table a scan (SOS) uses must have been defined by a
// DHT before it (stb 2.27 decodes with the never-initialized table otherwise:
// found by make fuzz as an assertion in stbi__jpeg_huff_decode); and so must
// the quantization table of every component a scan codes, by a DQT (stb 2.27
// does not zero its decoder, so it dequantizes with leftover heap memory:
// found by fuzz_image as a signed overflow of that garbage times a DC
// coefficient; libjpeg refuses such files, "Quantization table 0x00 was not
// defined"). Markers are walked as stb does: segments with a length, the
// stand-alone ones (SOI, RSTn, TEM), and entropy-coded data (after SOS) up to
// the next 0xFF that is not a stuffed 0xFF00 or a restart marker.
void check_jpeg_tables(std::string_view b, size_t pos, const std::string& name) {
  bool defined[2][4] = {};  // [DC, AC][Huffman table id]
  bool quant_defined[4] = {};
  int quant_of_component[256];  // the last frame header's table per component id; -1: none
  std::fill(std::begin(quant_of_component), std::end(quant_of_component), -1);
  auto undefined = [&](size_t scan, const std::string& table, const char* segment) {
    MINIDL_FAIL("ImageFolder: cannot read image ", name, ": corrupt JPEG: the scan at byte offset ", scan, " uses ",
                table, ", which no ", segment, " segment before it defines");
  };
  while (pos + 1 < b.size()) {
    if (at(b, pos) != 0xFF || at(b, pos + 1) == 0x00 || (at(b, pos + 1) >= 0xD0 && at(b, pos + 1) <= 0xD7)) {
      ++pos;  // entropy-coded data (or garbage stb skips too)
      continue;
    }
    const uint8_t marker = at(b, pos + 1);
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xD9) return;  // EOI
    if (marker == 0xD8 || marker == 0x01) {
      pos += 2;
      continue;
    }
    if (pos + 3 >= b.size()) return;
    const size_t length = (size_t(at(b, pos + 2)) << 8) | at(b, pos + 3);
    const size_t end = pos + 2 + length;
    if (marker == 0xC4) {
      size_t p = pos + 4;
      // stb reads a table cut off by the end of the data too, with zeros for the missing bytes.
      while (p < end && p < b.size()) {
        size_t codes = 0;
        for (size_t i = 1; i <= 16 && p + i < b.size(); ++i) codes += at(b, p + i);
        MINIDL_CHECK(codes <= 256, "ImageFolder: cannot read image ", name, ": corrupt JPEG: Huffman table at byte offset ",
                     p, " has ", codes, " codes (at most 256)");
        if ((at(b, p) >> 4) <= 1 && (at(b, p) & 15) <= 3) defined[at(b, p) >> 4][at(b, p) & 15] = true;
        p += 17 + codes;
      }
    }
    if (marker == 0xDB) {  // DQT: (precision << 4 | id, then 64 values of 8 or 16 bits) per table
      for (size_t p = pos + 4; p < end && p < b.size(); p += (at(b, p) >> 4) == 0 ? 65 : 129)
        if ((at(b, p) >> 4) <= 1 && (at(b, p) & 15) <= 3) quant_defined[at(b, p) & 15] = true;
    }
    if (marker == 0xC0 || marker == 0xC1 || marker == 0xC2) {  // SOF: ..., n, then (id, sampling, table) each
      std::fill(std::begin(quant_of_component), std::end(quant_of_component), -1);
      for (size_t i = 0; pos + 9 < b.size() && i < at(b, pos + 9) && pos + 12 + 3 * i < b.size(); ++i)
        quant_of_component[at(b, pos + 10 + 3 * i)] = at(b, pos + 12 + 3 * i);
    }
    if (marker == 0xDA && pos + 4 < b.size()) {  // SOS: n components, (id, DC<<4 | AC) each, then Ss, Se
      const size_t n = at(b, pos + 4), params = pos + 5 + 2 * n;
      const bool dc = params < b.size() && at(b, params) == 0;          // Ss = 0: DC coefficients
      const bool ac = params + 1 < b.size() && at(b, params + 1) > 0;  // Se > 0: AC coefficients
      for (size_t i = 0; i < n && pos + 6 + 2 * i < b.size(); ++i) {
        const uint8_t component = at(b, pos + 5 + 2 * i);
        const int quant = quant_of_component[component];
        if (quant >= 0 && quant <= 3 && !quant_defined[quant])
          undefined(pos, "quantization table " + std::to_string(quant) + " (component " + std::to_string(component) + ")",
                    "DQT");
        const uint8_t tables = at(b, pos + 6 + 2 * i);
        for (int kind : {0, 1}) {
          const int id = kind == 0 ? tables >> 4 : tables & 15;
          if ((kind == 0 ? dc : ac) && id <= 3 && !defined[kind][id])
            undefined(pos, (kind == 0 ? "DC Huffman table " : "AC Huffman table ") + std::to_string(id), "DHT");
        }
      }
    }
    pos = end;
  }
}

// Where a JPEG's data starts after its SOI marker, or 0 when `b` is not a
// JPEG. stb takes any number of 0xFF fill bytes before SOI (FF FF ... D8), so
// this does too: a file starting FF FF D8 is decoded as a JPEG.
size_t jpeg_after_soi(std::string_view b) {
  size_t i = 0;
  while (i < b.size() && at(b, i) == 0xFF) ++i;
  return i >= 1 && i < b.size() && at(b, i) == 0xD8 ? i + 1 : 0;
}

uint32_t be32(std::string_view b, size_t i) {
  return (uint32_t(at(b, i)) << 24) | (uint32_t(at(b, i + 1)) << 16) | (uint32_t(at(b, i + 2)) << 8) | at(b, i + 3);
}

// Every PNG chunk up to IEND must fit in the file: stb allocates an IDAT
// chunk's claimed length (up to 2 GiB) before it finds the data missing.
void check_png_chunks(std::string_view b, const std::string& name) {
  size_t pos = 8;  // after the signature
  bool seen_idat = false;
  while (pos + 8 <= b.size()) {
    const uint64_t length = be32(b, pos);
    MINIDL_CHECK(length + 12 <= b.size() - pos, "ImageFolder: cannot read image ", name, ": corrupt PNG: the chunk at byte offset ",
                 pos, " claims ", length, " bytes but the file has ", b.size(), " bytes");
    if (b.substr(pos + 4, 4) == "IEND") return;
    // stb memcpy's an empty first IDAT into its still-null buffer (undefined
    // behaviour, found by make fuzz): refuse an empty IDAT before any data.
    if (b.substr(pos + 4, 4) == "IDAT") {
      MINIDL_CHECK(length > 0 || seen_idat, "ImageFolder: cannot read image ", name,
                   ": corrupt PNG: an empty IDAT chunk at byte offset ", pos, " before any image data");
      seen_idat = true;
    }
    pos += 12 + length;
  }
}

}  // namespace

void check_image_bytes(std::string_view b, const std::string& name, bool whole_file) {
  // The formats stb would also decode; ImageFolder reads PNG, JPEG, BMP, GIF and TGA only.
  for (std::string_view other : {std::string_view("8BPS"), std::string_view("\x53\x80\xF6\x34"), std::string_view("P5"),
                                 std::string_view("P6"), std::string_view("#?RADIANCE"), std::string_view("#?RGBE")})
    MINIDL_CHECK(!starts_with(b, other), "ImageFolder: cannot read image ", name,
                 ": not a PNG, JPEG, BMP, GIF or TGA file (PSD, PIC, PNM and HDR images are not read)");
  if (const size_t data = jpeg_after_soi(b)) check_jpeg_tables(b, data, name);
  if (whole_file && starts_with(b, "\x89PNG\r\n\x1a\n")) check_png_chunks(b, name);
}

}  // namespace minidl::data
