// The key table: typed values parsed once (choices into enums, errors naming the key and the
// choices), and the run record it writes holds every key and reads back to the same configuration.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/train/config.h"

using namespace odyssey;

namespace {

const char* kToml = R"(
[model]
n_layer = 3
[train]
schedule = "constant"
[parallel]
sp_ring_layout = "contiguous"
[comm]
weights = "qwd"
grads = "tlq_hs"
)";

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    parse_run_config("", "test", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunConfig, ChoicesAreParsedIntoEnums) {
  const RunConfig c = parse_run_config(kToml, "test", {"train.precision=fp32"});
  EXPECT_EQ(c.train.schedule, ScheduleKind::constant);
  EXPECT_EQ(c.parallel.sp_ring_layout, RingLayout::contiguous);
  EXPECT_EQ(c.comm.weights, WeightComm::qwd);
  EXPECT_EQ(c.comm.grads, GradComm::tlq_hs);
  EXPECT_EQ(c.train.precision, Precision::fp32);
}

TEST(RunConfig, AnUnknownChoiceNamesTheKeyAndTheChoices) {
  EXPECT_NE(error_of({"comm.grads=int2"})
                .find("comm.grads: unknown value 'int2' (none, int8, int4, qgz, tlq, tlq_hs)"),
            std::string::npos);
  EXPECT_NE(error_of({"train.schedule=linear"}).find("train.schedule: unknown value 'linear'"),
            std::string::npos);
  EXPECT_NE(error_of({"parallel.sp_ring_layout=stripe"}).find("parallel.sp_ring_layout"), std::string::npos);
  try {
    parse_run_config("[comm]\nweights = 4\n", "cfg.toml", {});
    ADD_FAILURE() << "a number accepted for comm.weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comm.weights: expected a string (none, int8, int4, qwd)"),
              std::string::npos)
        << e.what();
  }
}

TEST(RunConfig, TheRecordHoldsEveryKeyAndReadsBack) {
  const RunConfig c = parse_run_config(kToml, "test", {"checkpoint.keep=3", "data.shuffle=true"});
  const nlohmann::json record = run_config_to_json(c);
  for (const char* section : {"model", "data", "train", "parallel", "comm", "checkpoint", "memory", "log"})
    EXPECT_TRUE(record.contains(section)) << section;
  EXPECT_EQ(record["model"]["n_layer"], 3);
  EXPECT_EQ(record["comm"]["grads"], "tlq_hs");
  EXPECT_EQ(record["train"]["schedule"], "constant");
  EXPECT_EQ(record["checkpoint"]["keep"], 3);
  // Every key of the record, fed back as --set, gives the same record.
  std::vector<std::string> overrides;
  for (const auto& [section, keys] : record.items())
    for (const auto& [key, value] : keys.items())
      overrides.push_back(section + "." + key + "=" +
                          (value.is_string() ? value.get<std::string>() : value.dump()));
  EXPECT_EQ(run_config_to_json(parse_run_config("", "record", overrides)), record);
}

TEST(RunConfig, PipelineKeys) {
  const RunConfig c = parse_run_config(
      "[parallel]\npp = 2\npp_schedule = \"interleaved\"\npp_virtual = 2\npp_layers = [1, 2, 3, 4]\n", "test",
      {});
  EXPECT_EQ(c.parallel.pp_schedule, PipelineSchedule::interleaved);
  EXPECT_EQ(c.parallel.pp_virtual, 2);
  EXPECT_EQ(c.parallel.pp_layers, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(parse_run_config("", "test", {"parallel.pp_layers=[3, 2]"}).parallel.pp_layers,
            (std::vector<int>{3, 2}));
  EXPECT_EQ(parse_run_config("", "test", {"parallel.pp_layers=5,4"}).parallel.pp_layers,
            (std::vector<int>{5, 4}));
  EXPECT_NE(error_of({"parallel.pp_layers=3,x"}).find("parallel.pp_layers: 'x' is not a valid integer"),
            std::string::npos);
  EXPECT_NE(error_of({"parallel.pp_schedule=zb2"}).find("parallel.pp_schedule: unknown value 'zb2'"),
            std::string::npos);
  try {
    parse_run_config("[parallel]\npp_layers = 4\n", "cfg.toml", {});
    ADD_FAILURE() << "a number accepted for parallel.pp_layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.pp_layers: expected a list of integers"),
              std::string::npos)
        << e.what();
  }
  // Layouts the pipeline cannot run are refused by key before any work (world of 4 ranks).
  auto invalid = [](const std::vector<std::string>& overrides) {
    RunConfig c = parse_run_config(
        "[model]\nn_layer = 6\n[data]\ntrain = \"x\"\n[train]\nglobal_batch = 8\nmicro_batch = 1\n", "test",
        overrides);
    try {
      c.validate(4);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(invalid({"parallel.pp=4"}), "accepted");
  EXPECT_EQ(invalid({"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.pp_virtual=2"}),
            "accepted");
  EXPECT_NE(invalid({"parallel.pp=4", "parallel.pp_layers=[1,1,1,1]"}).find("parallel.pp_layers places 4"),
            std::string::npos);
  EXPECT_NE(invalid({"parallel.pp=2", "parallel.pp_virtual=4"}).find("interleaved"), std::string::npos);
  EXPECT_NE(invalid({"parallel.pp=4", "parallel.pp_schedule=interleaved", "parallel.pp_virtual=2"})
                .find("model.n_layer (6) must be at least the number of stages (8"),
            std::string::npos);
  EXPECT_NE(invalid({"parallel.pp=1", "parallel.dp=4", "parallel.pp_virtual=2"}).find("parallel.pp_virtual"),
            std::string::npos);
}

}  // namespace
