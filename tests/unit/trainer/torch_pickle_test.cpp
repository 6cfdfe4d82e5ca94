// The torch.save reader (trainer/checkpoint/torch_pickle.h) on files written
// by PyTorch itself (tests/data/checkpoint, made by its make_fixtures.py):
// every value as Python wrote it, storages shared between views, inert
// objects for argparse.Namespace and numpy, and the refusals: a pickled call
// of os.system, a truncated file, a file that is not a zip.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/core/error.h"
#include "trainer/checkpoint/torch_pickle.h"

namespace zlm::trainer {
namespace {

namespace fs = std::filesystem;
using K = PyValue::Kind;

const std::string kDir = std::string(ZLM_TEST_DATA_DIR) + "/checkpoint/";

TEST(TorchPickle, ReadsEveryValueAsPythonWroteIt) {
  const PyValue v = load_torch_file(kDir + "values.pt");
  ASSERT_TRUE(v.is(K::Dict));
  EXPECT_TRUE(torch::equal(v.at("f32").as_tensor(), torch::arange(12, torch::kFloat).view({3, 4}) * 0.5));
  EXPECT_TRUE(torch::equal(v.at("bf16").as_tensor(), (torch::arange(6, torch::kFloat) - 2.5).to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(v.at("f16").as_tensor(), (torch::arange(5, torch::kFloat) / 4).to(torch::kHalf)));
  EXPECT_TRUE(torch::equal(v.at("i64").as_tensor(), torch::tensor({int64_t{-3}, int64_t{0}, int64_t{1} << 40})));
  EXPECT_TRUE(torch::equal(v.at("bool").as_tensor(), torch::tensor({true, false, true})));
  EXPECT_TRUE(torch::equal(v.at("u8").as_tensor(), torch::arange(4, torch::kByte)));
  const auto base = torch::arange(20, torch::kFloat);
  const torch::Tensor& view_t = v.at("view_t").as_tensor();
  EXPECT_FALSE(view_t.is_contiguous());
  EXPECT_TRUE(torch::equal(view_t, base.view({4, 5}).t()));
  EXPECT_TRUE(torch::equal(v.at("slice").as_tensor(), base.slice(0, 7, 12)));
  EXPECT_EQ(view_t.data_ptr<float>() + 7, v.at("slice").as_tensor().data_ptr<float>()) << "one storage, as in Python";
  EXPECT_EQ(v.at("scalar").as_tensor().dim(), 0);
  EXPECT_EQ(v.at("scalar").as_tensor().item<double>(), 3.25);
  EXPECT_EQ(v.at("empty").as_tensor().sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(torch::equal(v.at("param").as_tensor(), torch::ones({2, 2})));

  const PyValue& n = v.at("nested");
  const int64_t ints[] = {1, -1, 255, 256, 65535, 65536, -(int64_t{1} << 31), int64_t{1} << 31, INT64_MIN, INT64_MAX};
  ASSERT_EQ(n.at("list").items.size(), std::size(ints));
  for (size_t k = 0; k < std::size(ints); ++k) EXPECT_EQ(n.at("list").items[k]->as_int(), ints[k]) << k;
  EXPECT_EQ(n.at("tuple").items[0]->as_float(), 1.5);
  EXPECT_EQ(n.at("tuple").items[1]->as_str(), "x");
  EXPECT_TRUE(n.at("none").is(K::None));
  EXPECT_TRUE(n.at("t").b);
  EXPECT_FALSE(n.at("f").b);
  EXPECT_EQ(n.at("str").as_str(), "h\xc3\xa9llo \xe2\x9c\x93");

  const PyValue& args = v.at("args");  // Megatron's args: an inert argparse.Namespace, fields by name
  EXPECT_TRUE(args.is(K::Object));
  EXPECT_EQ(args.s, "argparse.Namespace");
  EXPECT_EQ(args.at("num_layers").as_int(), 2);
  EXPECT_EQ(args.at("hidden_size").as_int(), 64);
  EXPECT_EQ(args.at("params_dtype").s, "torch.bfloat16");
  EXPECT_EQ(args.at("name").as_str(), "gpt");
  EXPECT_TRUE(v.at("np").is(K::Object));  // numpy: recorded, never built
  ASSERT_TRUE(v.at("size").is(K::Tuple));
  EXPECT_EQ(v.at("size").items[1]->as_int(), 3);
  EXPECT_EQ(v.at("bytes").s, std::string("\x00\xff" "abc", 5));
  EXPECT_EQ(v.at("iteration").as_int(), 150);
  EXPECT_EQ(v.at("lr").as_float(), 1.5e-4);
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_THROW(v.at("missing"), Error);
}

std::string error_of(const std::string& path) {
  try {
    load_torch_file(path);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    return e.what();
  }
  return "(no error)";
}

TEST(TorchPickle, RefusesAPickledCallOfOsSystem) {
  const std::string msg = error_of(kDir + "evil.pt");
  EXPECT_NE(msg.find("refused the global posix.system"), std::string::npos) << msg;
  EXPECT_NE(msg.find("evil.pt"), std::string::npos) << msg;
}

TEST(TorchPickle, NamesTheFileOfATruncatedOrForeignOne) {
  const fs::path dir = fs::temp_directory_path() / ("zlm_pickle_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ifstream in(kDir + "values.pt", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir / "cut.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::ofstream(dir / "text.pt", std::ios::binary) << "not a checkpoint\n";
  for (const char* name : {"cut.pt", "text.pt"}) {
    const std::string msg = error_of((dir / name).string());
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
  // (not fs::remove_all: libtorch.so carries its own copy, which crashes when called from here)
  for (const char* name : {"cut.pt", "text.pt"}) fs::remove(dir / name);
  fs::remove(dir);
}

// save_torch_file's output read back (Python's torch.load reading it is the
// reference test tests/reference/megatron_checkpoint_reads.py).
TEST(TorchPickle, WritesWhatItReads) {
  auto d = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { d->entries.emplace_back(py_str(k), std::move(v)); };
  put("w", py_tensor(torch::arange(6, torch::kFloat).view({2, 3}).t()));  // written contiguous
  put("h", py_tensor(torch::ones({3}, torch::kBFloat16)));
  put("big", py_int(int64_t{1} << 40));
  put("neg", py_int(-7));
  put("x", py_float(0.1));
  put("none", py_none());
  auto fields = py_dict();
  fields->entries.emplace_back(py_str("num_layers"), py_int(2));
  fields->entries.emplace_back(py_str("params_dtype"), py_global("torch.float32"));
  put("args", py_namespace(fields));
  auto list = std::make_shared<PyValue>();
  list->kind = K::List;
  list->items = {py_int(1), py_str("two")};
  put("list", list);
  auto scaler = py_dict();
  scaler->entries.emplace_back(py_str("cur_scale"), py_float(1.0));
  put("scaler", py_object("deepspeed.runtime.fp16.loss_scaler.LossScaler", scaler));  // an instance: NEWOBJ + BUILD
  put("betas", py_tuple({py_float(0.9), py_float(0.95)}));
  const fs::path file = fs::temp_directory_path() / ("zlm_pickle_write_" + std::to_string(getpid()) + ".pt");
  save_torch_file(file.string(), *d);
  const PyValue v = load_torch_file(file.string());
  const PyValue shapes = load_torch_file(file.string(), TensorData::kShapesOnly);  // the pickle alone: meta tensors
  fs::remove(file);
  EXPECT_TRUE(shapes.at("w").as_tensor().is_meta());
  EXPECT_EQ(shapes.at("w").as_tensor().sizes(), c10::IntArrayRef({3, 2}));
  EXPECT_EQ(shapes.at("h").as_tensor().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(v.at("scaler").s, "deepspeed.runtime.fp16.loss_scaler.LossScaler");
  EXPECT_EQ(v.at("scaler").at("cur_scale").as_float(), 1.0);
  ASSERT_TRUE(v.at("betas").is(K::Tuple));
  EXPECT_EQ(v.at("betas").items[1]->as_float(), 0.95);
  EXPECT_TRUE(torch::equal(v.at("w").as_tensor(), torch::arange(6, torch::kFloat).view({2, 3}).t()));
  EXPECT_TRUE(torch::equal(v.at("h").as_tensor(), torch::ones({3}, torch::kBFloat16)));
  EXPECT_EQ(v.at("big").as_int(), int64_t{1} << 40);
  EXPECT_EQ(v.at("neg").as_int(), -7);
  EXPECT_EQ(v.at("x").as_float(), 0.1);
  EXPECT_TRUE(v.at("none").is(K::None));
  EXPECT_EQ(v.at("args").at("num_layers").as_int(), 2);
  EXPECT_EQ(v.at("args").at("params_dtype").s, "torch.float32");
  ASSERT_EQ(v.at("list").items.size(), 2u);
  EXPECT_EQ(v.at("list").items[1]->as_str(), "two");
}

// Raw pickles (protocol 2 opcodes a zip's data.pkl never holds, and damage).
TEST(TorchPickle, RawPicklesAndTheirDamage) {
  auto none = [](const std::string&, torch::ScalarType, int64_t) -> torch::Tensor { throw Error(ErrorKind::Internal, "no storage"); };
  // {'a': [1, 2]} as pickle.dumps(..., protocol=2) writes it
  const unsigned char raw[] = {0x80, 0x02, '}', 'q', 0x00, 'X', 0x01, 0x00, 0x00, 0x00, 'a', 'q', 0x01, ']',
                               'q', 0x02, '(', 'K', 0x01, 'K', 0x02, 'e', 's', '.'};
  const std::string ok(reinterpret_cast<const char*>(raw), sizeof raw);
  const PyValue v = unpickle(ok, none, "raw");
  ASSERT_EQ(v.at("a").items.size(), 2u);
  EXPECT_EQ(v.at("a").items[1]->as_int(), 2);
  for (size_t cut = 1; cut < ok.size(); ++cut) EXPECT_THROW(unpickle(ok.substr(0, cut), none, "raw"), Error) << cut;
  try {
    unpickle(std::string("\x80\x02\xff.", 4), none, "raw");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pickle opcode 0xff"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zlm::trainer
