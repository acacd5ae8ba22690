#include "core/config_table.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "core/check.h"

namespace shamn {

struct ConfigTable::Impl {
  toml::table root;
  std::string origin;
  std::set<std::string> overridden;  // keys set by --set: errors name the override
};

namespace {

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a bool";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date/time";
  }
}

}  // namespace

// A value set by `--set key=value` is located by its override, not a file line.
std::string ConfigTable::location(const std::string& key, const void* node) const {
  // The override of this key, of a table it lies in (--set 'model.memory={size=8}'),
  // or of a key inside it (--set foo.bar=1 made the table foo).
  for (const std::string& o : impl_->overridden)
    if (o == key || key.starts_with(o + ".") || o.starts_with(key + ".")) return "--set " + o;
  std::ostringstream out;
  out << impl_->origin << ":" << static_cast<const toml::node*>(node)->source().begin.line;
  return out.str();
}

void ConfigTable::type_error(const std::string& key, const void* node, const char* expected,
                             const char* hint) const {
  const auto& n = *static_cast<const toml::node*>(node);
  throw InputError(location(key, node) + ": key '" + key + "' must be " + expected + ", got " + type_name(n) +
                   hint);
}

ConfigTable ConfigTable::parse(const std::string& text, const std::string& origin) {
  ConfigTable t;
  t.impl_ = std::make_shared<Impl>();
  t.impl_->origin = origin;
  try {
    t.impl_->root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream out;
    out << origin << ":" << e.source().begin.line << ": TOML syntax error: " << e.description();
    throw InputError(out.str());
  }
  return t;
}

ConfigTable ConfigTable::parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SHAMN_INPUT_CHECK(in.good(), "cannot open config file '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path);
}

const std::string& ConfigTable::origin() const { return impl_->origin; }

namespace {
const toml::node* find(const toml::table& root, const std::string& key) { return root.at_path(key).node(); }
}  // namespace

bool ConfigTable::has(const std::string& key) const { return find(impl_->root, key) != nullptr; }

std::optional<int64_t> ConfigTable::get_int(const std::string& key) const {
  const toml::node* n = find(impl_->root, key);
  if (!n) return std::nullopt;
  if (!n->is_integer()) type_error(key, n, "an integer", "");
  return n->as_integer()->get();
}

std::optional<double> ConfigTable::get_float(const std::string& key) const {
  const toml::node* n = find(impl_->root, key);
  if (!n) return std::nullopt;
  if (!n->is_floating_point())
    type_error(key, n, "a float", n->is_integer() ? " (write it with a decimal point, e.g. 0.0)" : "");
  return n->as_floating_point()->get();
}

std::optional<bool> ConfigTable::get_bool(const std::string& key) const {
  const toml::node* n = find(impl_->root, key);
  if (!n) return std::nullopt;
  if (!n->is_boolean()) type_error(key, n, "a bool (true or false)", "");
  return n->as_boolean()->get();
}

std::optional<std::string> ConfigTable::get_string(const std::string& key) const {
  const toml::node* n = find(impl_->root, key);
  if (!n) return std::nullopt;
  if (!n->is_string()) type_error(key, n, "a string", "");
  return n->as_string()->get();
}

std::optional<std::vector<int64_t>> ConfigTable::get_int_array(const std::string& key) const {
  const toml::node* n = find(impl_->root, key);
  if (!n) return std::nullopt;
  if (!n->is_array()) type_error(key, n, "an array of integers", "");
  std::vector<int64_t> out;
  for (const toml::node& item : *n->as_array()) {
    if (!item.is_integer()) type_error(key, &item, "an array of integers", "");
    out.push_back(item.as_integer()->get());
  }
  return out;
}

std::optional<std::vector<std::string>> ConfigTable::get_string_array(const std::string& key) const {
  const toml::node* n = find(impl_->root, key);
  if (!n) return std::nullopt;
  if (!n->is_array()) type_error(key, n, "an array of strings", "");
  std::vector<std::string> out;
  for (const toml::node& item : *n->as_array()) {
    if (!item.is_string()) type_error(key, &item, "an array of strings", "");
    out.push_back(item.as_string()->get());
  }
  return out;
}

std::string ConfigTable::where(const std::string& key) const {
  const toml::node* n = find(impl_->root, key);
  return n ? location(key, n) : impl_->origin;
}

namespace {

// The entries of a table in file order (toml++ keeps them sorted by key).
std::vector<std::pair<std::string, const toml::node*>> in_file_order(const toml::table& table) {
  std::vector<std::pair<std::string, const toml::node*>> entries;
  for (const auto& [k, v] : table) entries.emplace_back(std::string(k.str()), &v);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto sa = a.second->source().begin, sb = b.second->source().begin;
    return sa.line != sb.line ? sa.line < sb.line : sa.column < sb.column;
  });
  return entries;
}

std::string literal(const toml::node& node) {
  if (const auto* f = node.as_floating_point()) {
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof buf, f->get()).ptr;
    std::string text(buf, end);
    if (text.find_first_of(".eninf") == std::string::npos) text += ".0";
    return text;
  }
  std::ostringstream out;
  node.visit([&out](const auto& v) { out << v; });
  return out.str();
}

}  // namespace

std::vector<std::string> ConfigTable::children(const std::string& table) const {
  const toml::node* n = table.empty() ? &impl_->root : find(impl_->root, table);
  if (!n) return {};
  if (!n->is_table()) type_error(table, n, "a table", "");
  std::vector<std::string> names;
  for (const auto& [k, v] : in_file_order(*n->as_table())) names.push_back(k);
  return names;
}

std::vector<ConfigTable::Leaf> ConfigTable::leaves(const std::string& table) const {
  const toml::node* n = table.empty() ? &impl_->root : find(impl_->root, table);
  if (!n) return {};
  if (!n->is_table()) type_error(table, n, "a table", "");
  std::vector<Leaf> out;
  auto walk = [&](const auto& self, const toml::table& t, const std::string& prefix) -> void {
    for (const auto& [k, v] : in_file_order(t)) {
      if (v->is_table()) {
        self(self, *v->as_table(), prefix + k + ".");
        continue;
      }
      Leaf leaf;
      leaf.key = prefix + k;
      leaf.where = impl_->origin + ":" + std::to_string(v->source().begin.line);
      leaf.literal = literal(*v);
      if (const toml::array* a = v->as_array()) {
        leaf.is_array = true;
        leaf.mixed_types = !a->empty() && !a->is_homogeneous();
        for (const toml::node& e : *a) leaf.elements.push_back(literal(e));
      }
      out.push_back(std::move(leaf));
    }
  };
  walk(walk, *n->as_table(), "");
  return out;
}

void ConfigTable::reject_unknown(const std::string& table, const std::set<std::string>& known) const {
  const toml::node* n = table.empty() ? &impl_->root : find(impl_->root, table);
  if (!n || !n->is_table()) return;
  for (const auto& [k, child] : *n->as_table()) {
    const std::string key = table.empty() ? std::string(k.str()) : table + "." + std::string(k.str());
    // "sparse.block" = 8 quoted is one key with a dot in its name, not block in
    // [model.sparse]: it would pass the name check and be read by no one.
    SHAMN_INPUT_CHECK(k.str().find('.') == std::string_view::npos, location(key, &child), ": key \"", k.str(),
                      "\" is quoted with a dot in it: write it unquoted (", k.str(),
                      " = ...) to set that key of its table");
    SHAMN_INPUT_CHECK(known.count(key), location(key, &child), ": unknown key '", key, "'");
    // A known table given a value (`moe = 4` for [model.moe]) would leave every key
    // under it silently at its default.
    const auto next = known.lower_bound(key + ".");
    const bool known_table = next != known.end() && next->starts_with(key + ".");
    SHAMN_INPUT_CHECK(!known_table || child.is_table(), location(key, &child), ": key '", key,
                      "' must be a table ([", key, "]), got ", type_name(child));
    if (child.is_table()) reject_unknown(key, known);
  }
}

void ConfigTable::set_from_text(const std::string& assignment) {
  const size_t eq = assignment.find('=');
  SHAMN_INPUT_CHECK(eq != std::string::npos && eq > 0, "override '", assignment,
                    "' is not of the form section.key=value");
  std::string key = assignment.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  const std::string value = assignment.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value, "--set " + key);
  } catch (const toml::parse_error& e) {
    throw InputError("--set " + assignment + ": the value is not valid TOML (" +
                     std::string(e.description()) +
                     "); quote strings, inside shell quotes: --set 'key=\"text\"'");
  }
  SHAMN_INPUT_CHECK(parsed.size() == 1, "--set ", key, ": the value '", value,
                    "' is more than one TOML value (a line break inside it?)");
  // Walk/create the parent tables, then replace the leaf.
  toml::table* table = &impl_->root;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
    const std::string part = key.substr(start, dot - start);
    toml::node* child = table->get(part);
    if (!child) child = &table->insert_or_assign(part, toml::table{}).first->second;
    SHAMN_INPUT_CHECK(child->is_table(), "--set ", key, ": '", part, "' is not a table");
    table = child->as_table();
  }
  table->insert_or_assign(key.substr(start), *parsed.get("v"));
  impl_->overridden.insert(key);
}

std::string toml_float(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  std::string str = s.str();
  if (str.find_first_of(".eEni") == std::string::npos) str += ".0";  // "inf"/"nan" stay
  return str;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace shamn
