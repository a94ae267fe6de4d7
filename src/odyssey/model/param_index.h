// A table's tensors by name, indexed once: looking every layer's tensors up through ParamTable::find (a
// scan of the table) is quadratic in the layers, minutes for a few thousand (issue 42).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "odyssey/core/error.h"
#include "odyssey/model/params.h"

namespace odyssey {

class ParamIndex {
 public:
  explicit ParamIndex(const ParamTable& table) {
    for (const ParamInfo& p : table.tensors()) by_name_.emplace(p.name, &p);  // the first of a name, as find
  }
  const ParamInfo& find(const std::string& name) const {
    const auto it = by_name_.find(name);
    ODY_CHECK(it != by_name_.end(), "no parameter named '{}' in the model", name);
    return *it->second;
  }
  const ParamInfo* try_find(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

 private:
  std::unordered_map<std::string_view, const ParamInfo*> by_name_;  // views of the table's names
};

}  // namespace odyssey
