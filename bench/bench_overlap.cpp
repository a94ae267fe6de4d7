// How much gradient communication data parallelism hides behind backward (run under mpirun -np 2).
//
// Two identical models train side by side on every rank, steps alternating: one reduces each gradient
// bucket as soon as backward completes it (overlap), the other launches every reduction after backward
// (no overlap). Timed per step: forward + backward + the wait for the reductions (the optimizer is the
// same in both and left out), ranks aligned by a barrier first. Without overlap the wait is the whole
// communication time, so
//   hidden_fraction = (step_no_overlap - step_overlap) / comm_no_overlap
// is the share of it that overlapping removed from the step (medians over the steps), and
//   completed_in_backward = 1 - exposed_wait_overlap / comm_no_overlap
// the share of the communication that finished while backward ran. The two differ when the
// reductions take CPU from the compute (shared-memory MPI with every core computing). Printed as JSON.
//
// Usage: mpirun -np 2 bench_overlap [--n-layer 6] [--n-head 6] [--d-model 384] [--seq-len 128]
//                                  [--vocab 8192] [--batch 2] [--steps 6] [--stage 0] [--bucket-mb 25]
//                                  [--threads 1]
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/parallel/zero.h"

#include "odyssey/train/host_info.h"

using namespace odyssey;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Run {
  GPT2 model;
  AdamW optimizer{AdamWConfig{}};
  ZeroEngine engine;
  std::vector<double> step_ms, wait_ms;
  Run(const ModelConfig& c, Communicator& dp, ZeroOptions o)
      : model(c, false), engine(model, dp, o, optimizer) {}
};

int bench(int argc, char** argv) {
  ModelConfig c;
  c.n_layer = 6, c.n_head = 6, c.d_model = 384, c.seq_len = 128, c.vocab_size = 8192;
  int batch = 2, steps = 6, stage = 0, threads = 1;
  double bucket_mb = 25;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--n-layer")
      c.n_layer = v;
    else if (k == "--n-head")
      c.n_head = v;
    else if (k == "--d-model")
      c.d_model = v;
    else if (k == "--seq-len")
      c.seq_len = v;
    else if (k == "--vocab")
      c.vocab_size = v;
    else if (k == "--batch")
      batch = v;
    else if (k == "--steps")
      steps = v;
    else if (k == "--stage")
      stage = v;
    else if (k == "--threads")
      threads = v;
    else if (k == "--bucket-mb")
      bucket_mb = std::atof(argv[i + 1]);
    else
      fail("unknown option {}", k);
  }
  omp_set_num_threads(threads);
  Communicator& dp = world();
  ZeroOptions o;
  o.stage = stage;
  o.bucket_mb = bucket_mb;
  Run overlap(c, dp, o);
  o.overlap = false;
  Run serial(c, dp, o);
  {
    std::vector<float> init(size_t(overlap.model.num_params()));
    init_parameters(init.data(), overlap.model.table(), c, 1);
    overlap.engine.load(init.data());
    serial.engine.load(init.data());
  }
  const int T = c.seq_len;
  std::vector<int> in(size_t(batch) * T), tg(size_t(batch) * T);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int((i * 7919 + size_t(dp.rank()) * 31) % size_t(c.vocab_size));
    tg[i] = int((i * 104729 + 7) % size_t(c.vocab_size));
  }
  const float dloss = 1.0f / float(batch * T * dp.size());
  for (int s = 0; s < steps + 1; ++s)  // step 0 warms up both
    for (Run* r : {&overlap, &serial}) {
      r->engine.zero_grad();
      r->engine.begin_micro_step(true);
      dp.barrier();
      Timer t;
      int64_t n = 0;
      r->model.forward_backward(in.data(), tg.data(), nullptr, batch, T, dloss, &n);
      Timer w;
      r->engine.end_micro_step();
      if (s == 0) continue;
      r->wait_ms.push_back(w.ms());
      r->step_ms.push_back(t.ms());
    }
  const double step_ov = median(overlap.step_ms), step_no = median(serial.step_ms);
  const double comm_no = median(serial.wait_ms);
  nlohmann::json out = {{"host", odyssey::host_json()},
                        {"ranks", dp.size()},
                        {"zero_stage", stage},
                        {"parameters", overlap.model.num_params()},
                        {"gradient_mb", overlap.model.num_params() * 4 / 1e6},
                        {"buckets", overlap.engine.partition().segments().size()},
                        {"bucket_mb", bucket_mb},
                        {"batch", batch},
                        {"seq_len", T},
                        {"threads_per_rank", threads},
                        {"steps", steps},
                        {"step_ms_overlap", step_ov},
                        {"step_ms_no_overlap", step_no},
                        {"comm_ms_no_overlap", comm_no},
                        {"exposed_wait_ms_overlap", median(overlap.wait_ms)},
                        {"hidden_fraction", comm_no > 0 ? (step_no - step_ov) / comm_no : 0.0},
                        {"completed_in_backward", comm_no > 0 ? 1 - median(overlap.wait_ms) / comm_no : 0.0}};
  if (dp.rank() == 0) std::cout << out.dump(2) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, bench, "bench_overlap");
}
