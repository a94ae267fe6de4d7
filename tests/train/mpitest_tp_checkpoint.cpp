// Tensor-parallel checkpoints over real ranks: the world is the tp group (np 1, 2, 4) of a Llama
// with GQA (8 heads over 2 kv heads: at tp 4 each kv head is replicated on 2 ranks), each rank
// ZeRO-split in 2 inside its tp rank. The ranks check their replicas (check_tp_replicas) and write
// their boxes into one directory concurrently; rank 0 commits; every rank then reads the checkpoint
// back at tp 1 and at its own tp, element for element. A replica that differs on one rank (a norm
// weight, a replicated kv head) fails every rank alike, naming the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/checkpoint/sliced.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "odyssey/train/sharded_checkpoint.h"

namespace fs = std::filesystem;
using namespace odyssey;

namespace {

ModelConfig llama_gqa() {
  ModelConfig c;
  c.arch = Arch::llama;
  c.n_layer = 2, c.n_head = 8, c.n_kv_head = 2, c.d_model = 16, c.d_ff = 36, c.seq_len = 5;
  c.vocab_size = 13;  // no tp divides it: padded rows
  return c;
}

float global_value(const ParamInfo& p, int64_t g) {
  return float(p.index * 10000 + g);
}

std::vector<float> local_values(const ParamTable& local) {
  std::vector<float> buf(size_t(local.total()), 0.0f);
  for (const ParamInfo& p : local.tensors())
    p.for_each_run([&](int64_t l, int64_t g, int64_t n) {
      for (int64_t i = 0; i < n; ++i) buf[size_t(p.offset + l + i)] = global_value(p, g + i);
    });
  return buf;
}

// Two ZeRO shards inside each tp rank: the halves of its local buffer.
std::vector<DenseRange> halves(const ParamTable& local, const float* data) {
  const int64_t h = local.total() / 2;
  return {{0, h, data}, {h, local.total(), data + h}};
}

std::string shared_dir(Communicator& world) {
  int32_t id = world.rank() == 0 ? int32_t(::getpid()) : 0;
  world.broadcast(&id, 1, DType::i32, 0);
  const std::string dir =
      (fs::temp_directory_path() / ("odyssey_tp_checkpoint_" + std::to_string(id))).string();
  if (world.rank() == 0) fs::create_directories(dir);
  world.barrier();
  return dir;
}

}  // namespace

TEST(TpCheckpoint, RanksWriteBoxesTogetherAndAnyTpReadsThem) {
  Communicator& world = odyssey::world();
  const int t = world.size(), r = world.rank();
  const ParamTable model(llama_gqa());
  const ParamTable local = model.tensor_parallel(t, r);
  const std::vector<float> values = local_values(local);
  const std::vector<DenseRange> pieces = halves(local, values.data());
  const std::string run = shared_dir(world);
  const std::string tmp = checkpoint_tmp_dir(run, 1);
  if (r == 0) fs::create_directories(tmp);
  world.barrier();

  check_tp_replicas(world, local, pieces);
  // Each ZeRO shard of each tp rank writes its own file, all ranks at once.
  WrittenFile mine[2];
  for (int z = 0; z < 2; ++z)
    mine[z] = write_slice_file(tmp, "params", 2 * r + z, local, {pieces[size_t(z)]}, TpPiece{t, r});
  std::vector<WrittenFile> all(size_t(2 * t));
  world.all_gather(mine, all.data(), sizeof(mine), DType::u8);
  std::string dir = run + "/" + checkpoint_step_name(1);
  if (r == 0) {
    CheckpointState state;
    state.model = llama_gqa();
    state.step = 1;
    state.layout = {{"tp", t}, {"zero_shards", 2}};
    dir = commit_checkpoint(run, tmp, state, model, 2 * t, {"params"}, {all}, 0);
  }
  world.barrier();

  const CheckpointState state = read_checkpoint_manifest(dir);
  EXPECT_EQ(state.format_version, t > 1 ? 3 : 2);
  // Every rank reads the whole model (tp 1) and its own tp shard.
  std::vector<float> whole(size_t(model.total()));
  read_slices(dir, state, model, "params", {{0, model.total()}}, whole.data());
  EXPECT_EQ(whole, local_values(model));
  std::vector<float> shard(size_t(local.total()), 0.0f);
  read_slices(dir, state, local, "params", {{0, local.total()}}, shard.data());
  EXPECT_EQ(shard, values);
  world.barrier();
  if (r == 0) fs::remove_all(run);
}

namespace {

// Rank `bad` perturbs one element of `tensor`; every rank must then fail naming it.
void expect_replica_named(const std::string& tensor, int bad) {
  Communicator& world = odyssey::world();
  const int t = world.size(), r = world.rank();
  const ParamTable local = ParamTable(llama_gqa()).tensor_parallel(t, r);
  std::vector<float> values = local_values(local);
  if (r == bad) values[size_t(local.find(tensor).offset + 3)] += 1.0f;
  try {
    check_tp_replicas(world, local, halves(local, values.data()));
    ADD_FAILURE() << "rank " << r << " accepted a differing replica of " << tensor;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter " + tensor + " is replicated"), std::string::npos)
        << e.what();
  }
}

}  // namespace

TEST(TpCheckpoint, DifferingNormReplicaIsNamedOnEveryRank) {
  if (odyssey::world().size() == 1) GTEST_SKIP() << "no replicas at tp 1";
  expect_replica_named("model.layers.1.post_attention_layernorm.weight", odyssey::world().size() - 1);
}

TEST(TpCheckpoint, DifferingKvHeadReplicaIsNamedOnEveryRank) {
  if (odyssey::world().size() < 4) GTEST_SKIP() << "kv heads are replicated only at tp 4 (2 kv heads)";
  expect_replica_named("model.layers.0.self_attn.v_proj.weight", 3);  // tp ranks 2 and 3 hold kv head 1
}
