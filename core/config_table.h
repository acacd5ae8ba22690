#pragma once
// Typed, strict access to a parsed TOML document by dotted key ("model.sparse.block").
// Strict means no coercion: an integer is not a float, a float is not an integer,
// and nothing is a bool but a bool. Every error names the origin (file), the line
// and the key, so a user can go straight to it.
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace shamn {

class ConfigTable {
 public:
  // `origin` names the text in errors: a file path, or e.g. "ckpt.h5 (attribute config)".
  static ConfigTable parse(const std::string& text, const std::string& origin);
  static ConfigTable parse_file(const std::string& path);

  const std::string& origin() const;
  bool has(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_int_array(const std::string& key) const;
  std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;

  // The names of the direct children of `table` ("" = the root) in file order;
  // none when it is absent, an error naming the key when it is not a table.
  std::vector<std::string> children(const std::string& table) const;

  // A value under a table, for files that hold config keys as data (a sweep's
  // [sweep.set] and [sweep.axes]).
  struct Leaf {
    std::string key;      // dotted, below the table: nested tables and quoted dotted keys alike
    std::string where;    // "origin:line"
    std::string literal;  // as TOML text; a float in its shortest exact form with a point ("0.1", "1e-05")
    bool is_array = false;
    bool mixed_types = false;           // an array whose elements are not all of one type
    std::vector<std::string> elements;  // an array's element literals
  };
  // The leaves below `table` ("" = the root) in file order (tables are walked, arrays are leaves);
  // none when it is absent, an error naming the key when it is not a table.
  std::vector<Leaf> leaves(const std::string& table) const;

  // "origin:line" of the key, or just the origin when the key is absent.
  std::string where(const std::string& key) const;

  // Throws for the first key (depth-first) under `table` that is not listed in
  // `known` (full dotted names; a listed table admits only its listed children).
  void reject_unknown(const std::string& table, const std::set<std::string>& known) const;

  // Sets `key` from a "key=value" override written in TOML syntax (`--set`).
  void set_from_text(const std::string& assignment);

 private:
  // `node` is a toml::node (kept out of this header).
  std::string location(const std::string& key, const void* node) const;
  [[noreturn]] void type_error(const std::string& key, const void* node, const char* expected,
                               const char* hint) const;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// TOML literals for writing configs back: a float always with a decimal point or
// exponent (17 significant digits, so it reads back exactly), a string quoted and
// escaped.
std::string toml_float(double v);
std::string toml_string(const std::string& s);

}  // namespace shamn
