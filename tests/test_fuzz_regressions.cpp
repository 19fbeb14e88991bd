// Inputs that crashed a parser of outside bytes (found by the fuzz targets
// in fuzz/, or while writing them): each must now be refused with a
// minidl::Error that says what is wrong. The store's protocol cases, which
// need sockets, are in test_store_hostile.cpp.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "minidl/core/json_int.h"
#include "minidl/core/safetensors.h"
#include "minidl/data/cifar10.h"
#include "minidl/data/fashion_mnist.h"
#include "minidl/data/image_folder.h"
#include "minidl/dist/store_protocol.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/sgd.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// A safetensors file with this header and `data_bytes` zero bytes of data.
std::string safetensors_bytes(const std::string& header, size_t data_bytes = 0) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + std::string(data_bytes, '\0');
}

// A crashing input that libFuzzer wrote, kept in tests/goldens/fuzz/.
std::string fuzz_input(const std::string& name) {
  std::ifstream in(std::string(MINIDL_GOLDENS_DIR) + "/fuzz/" + name, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// fuzz_image's input: a byte picking 1, 3 or 4 channels, then the file.
void decode_fuzz_image(const std::string& input) {
  const int channels[] = {1, 3, 4};
  data::decode_image(std::string_view(input).substr(1), channels[static_cast<uint8_t>(input[0]) % 3], "fuzz.png");
}

std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

}  // namespace

TEST_CASE("safetensors: a shape whose strides overflow int64 is refused") {
  // 0 elements, so data_offsets [0, 0] match, but the strides of [0, 2^62, 4] overflow.
  const std::string file = safetensors_bytes(R"({"t":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})");
  CHECK_THROWS_CONTAINS(parse_safetensors(file, "strides.safetensors"), "strides.safetensors: tensor 't'");
  CHECK_THROWS_CONTAINS(parse_safetensors(file, "strides.safetensors"), "is too large");
}

// nlohmann throws out_of_range, not parse_error, for a number it cannot hold
// (9999999999e999999999); found by make fuzz.
TEST_CASE("safetensors: a JSON number that overflows is refused with minidl::Error") {
  CHECK_THROWS_CONTAINS(parse_safetensors(fuzz_input("safetensors-number-overflow"), "big.safetensors"),
                        "big.safetensors: invalid JSON header");
}

TEST_CASE("safetensors: parse_safetensors names the buffer and the byte offset") {
  CHECK_THROWS_CONTAINS(parse_safetensors(std::string("\x10\0\0", 3), "short.safetensors"),
                        "short.safetensors: file size 3 is too small");
  CHECK_THROWS_CONTAINS(parse_safetensors(safetensors_bytes("{\"a\":"), "cut.safetensors"),
                        "invalid JSON header at byte offset");
  const std::string ok = safetensors_bytes(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2);
  CHECK(parse_safetensors(ok, "ok.safetensors").at("w").numel() == 2);
}

TEST_CASE("FashionMNIST: header sizes whose strides overflow are refused") {
  // 0 images of 2^32-1 x 2^32-1 pixels: no payload, but the strides overflow int64.
  const std::string images = be32(data::FashionMNIST::kImagesMagic) + be32(0) + be32(0xFFFFFFFF) + be32(0xFFFFFFFF);
  const std::string labels = be32(data::FashionMNIST::kLabelsMagic) + be32(0);
  CHECK_THROWS_CONTAINS(data::FashionMNIST::from_bytes(images, "imgs.idx", labels, "labels.idx"),
                        "imgs.idx: the header sizes at byte offset 4 overflow");
}

TEST_CASE("FashionMNIST: truncated gzip data names the file") {
  const std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10);  // a gzip header and nothing else
  CHECK_THROWS_CONTAINS(data::FashionMNIST::from_bytes(gz, "imgs.gz", gz, "labels.gz"),
                        "imgs.gz: cannot decompress after byte offset 0");
}

TEST_CASE("CIFAR10::from_bytes checks records like the file reader") {
  CHECK_THROWS_CONTAINS(data::CIFAR10::from_bytes(std::string(3074, '\0'), "b.bin"), "b.bin: size 3074");
  CHECK_THROWS_CONTAINS(data::CIFAR10::from_bytes(std::string(3073, '\x0a'), "b.bin"), "label 10 at byte offset 0");
  CHECK(data::CIFAR10::from_bytes(std::string(3073, '\x01'), "b.bin").size() == 1);
}

TEST_CASE("decode_image: refuses garbage and images too large to decode") {
  CHECK_THROWS_CONTAINS(data::decode_image("not an image", 3, "x.png"), "cannot read image x.png");
  // A BMP header claiming 30000 x 30000 pixels (3.6 GB decoded as RGBA) and no pixels.
  std::string bmp = "BM" + std::string(12, '\0');
  std::string info(40, '\0');
  const int32_t w = 30000, h = 30000;
  info[0] = 40;
  std::memcpy(&info[4], &w, 4);
  std::memcpy(&info[8], &h, 4);
  info[12] = 1;   // planes
  info[14] = 24;  // bits per pixel
  bmp += info;
  CHECK_THROWS_CONTAINS(data::decode_image(bmp, 4, "huge.bmp"), "huge.bmp is 30000x30000 (HxW); images of more than 67108864 pixels");
}

// stb_image 2.27 (Debian's) writes past stbi__build_huffman's arrays for a
// JPEG Huffman table of more than 256 codes, also when the table is cut off
// by the end of the file (stb reads zeros there); found by fuzz_image.
TEST_CASE("decode_image: JPEG Huffman tables of more than 256 codes are refused before stb") {
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-jpeg-huffman-overflow")), "Huffman table at byte offset");
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-jpeg-huffman-truncated")), "Huffman table at byte offset");
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-jpeg-huffman-truncated")), "fuzz.png: corrupt JPEG");
  // stb also takes 0xFF fill bytes before SOI (FF FF D8 ...) as a JPEG; the
  // screen first looked for FF D8 at byte 0 only (found by make fuzz in CI).
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-jpeg-fill-before-soi")), "Huffman table at byte offset");
}

// stb allocates a PNG IDAT chunk's claimed length (here 1.8 GB) before
// finding that the 84-byte file does not have it; found by fuzz_image.
TEST_CASE("decode_image: a PNG chunk longer than the file is refused before stb allocates it") {
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-png-idat-2gib")), "corrupt PNG: the chunk at byte offset");
}

// stb copies an empty first IDAT chunk into a null buffer (memcpy(NULL, .., 0),
// undefined behaviour); found by make fuzz.
TEST_CASE("decode_image: an empty IDAT chunk before any image data is refused") {
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-png-empty-first-idat")), "an empty IDAT chunk");
}

// A scan that uses an AC Huffman table no DHT defined: stb 2.27 decodes with
// the table's uninitialized memory (an assertion under ASan's malloc fill);
// found by make fuzz.
TEST_CASE("decode_image: a JPEG scan using an undefined Huffman table is refused") {
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-jpeg-undefined-huffman-table")),
                        "uses AC Huffman table 0, which no DHT segment before it defines");
}

// A JPEG without any DQT segment: stb 2.27 does not zero its decoder, so it
// dequantized with leftover heap memory (pixels made of whatever the heap
// held); found by fuzz_image as UBSan's signed overflow of such a garbage
// quantizer times a DC coefficient (only inside a fuzzing process: a fresh
// process's heap happened to give small values).
TEST_CASE("decode_image: a JPEG scan whose quantization table nothing defined is refused") {
  CHECK_THROWS_CONTAINS(decode_fuzz_image(fuzz_input("image-jpeg-undefined-quant-table")),
                        "fuzz.png: corrupt JPEG: the scan at byte offset 548 uses quantization table 0 (component 1), "
                        "which no DQT segment before it defines");
}

TEST_CASE("decode_image: formats stb reads but ImageFolder does not are refused") {
  CHECK_THROWS_CONTAINS(data::decode_image("8BPS\x00\x01", 3, "a.png"), "a.png: not a PNG, JPEG, BMP, GIF or TGA");
  CHECK_THROWS_CONTAINS(data::decode_image("P6\n1 1\n255\n\x01\x02\x03", 3, "b.jpg"), "b.jpg: not a PNG");
}

TEST_CASE("Optimizer::load_state_dict: a 20-digit parameter index is refused") {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt({p}, 0.1, 0.9);
  optim::OptimizerStateDict state = opt.state_dict();
  state.tensors.emplace_back("state.99999999999999999999.momentum_buffer", zeros({2}));
  CHECK_THROWS_CONTAINS(opt.load_state_dict(state), "names parameter 99999999999999999999");
}

// fuzz_checkpoint's scheduler input with "last_epoch": 3.9e61 (a JSON float):
// nlohmann's get<int64_t>() converted it with undefined behaviour (UBSan:
// float-cast-overflow); a float that fits (1.5) was silently truncated. The
// integers of a state dict now must be JSON integers (core/json_int.h).
TEST_CASE("LRScheduler / GradScaler load_state_dict: integers that are floats or overflow are refused") {
  const std::string input = fuzz_input("checkpoint-scheduler-epoch-float");
  const nlohmann::json state = nlohmann::json::parse(input.substr(1));  // byte 0 picks the reader
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt({p}, 0.1, 0.9);
  optim::CosineAnnealingLR sched(opt, 10);
  CHECK_THROWS_CONTAINS(sched.load_state_dict(state),
                        "LRScheduler.load_state_dict: last_epoch: expected an integer, got 3.8");
  nlohmann::json half = sched.state_dict();
  half["_step_count"] = 1.5;
  CHECK_THROWS_CONTAINS(sched.load_state_dict(half), "_step_count: expected an integer, got 1.5");
  CHECK_NOTHROW(sched.load_state_dict(sched.state_dict()));

  amp::GradScaler scaler("cpu");
  nlohmann::json big = scaler.state_dict();
  big["_growth_tracker"] = uint64_t{1} << 63;
  CHECK_THROWS_CONTAINS(scaler.load_state_dict(big), "_growth_tracker: expected an integer that fits int64");
}

TEST_CASE("json_int64 / json_uint64: JSON integers only") {
  CHECK(json_int64(nlohmann::json(-7), "x") == -7);
  CHECK(json_int64(nlohmann::json(uint64_t{1} << 62), "x") == int64_t{1} << 62);
  CHECK_THROWS_CONTAINS(json_int64(nlohmann::json(2.0), "the count"), "the count: expected an integer, got 2.0");
  CHECK_THROWS_CONTAINS(json_int64(nlohmann::json("3"), "x"), "expected an integer, got \"3\"");
  CHECK(json_uint64(nlohmann::json(uint64_t{1} << 63), "x") == uint64_t{1} << 63);
  CHECK_THROWS_CONTAINS(json_uint64(nlohmann::json(-1), "the seed"), "the seed: expected an integer >= 0, got -1");
}
