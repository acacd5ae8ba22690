#include "train/gnuplot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/temp_file_cleanup.h"

extern char** environ;

namespace shamn {

namespace fs = std::filesystem;

std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const fs::path p = fs::path(dir) / "gnuplot";
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

std::string run_gnuplot(const std::string& gnuplot, const std::string& script, const std::string& work_prefix,
                        const std::string& shown_as) {
  // Private names (the pid) so two writers of one plot do not collide; those of
  // a process killed meanwhile go now.
  remove_orphaned_temp_files(work_prefix, ".gnuplot");
  remove_orphaned_temp_files(work_prefix, ".log");
  const std::string script_path = temp_path_for(work_prefix, ".gnuplot");
  const std::string log_path = temp_path_for(work_prefix, ".log");
  const TempFileRegistration script_registration(script_path), log_registration(log_path);
  {
    std::ofstream out(script_path, std::ios::binary);
    out << script;
    if (!out.good()) return "cannot write '" + script_path + "'";
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv = {const_cast<char*>(gnuplot.c_str()), const_cast<char*>(script_path.c_str()),
                             nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, gnuplot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  std::string error;
  if (rc != 0) {
    error = "cannot run " + gnuplot + ": " + std::strerror(rc);
  } else {
    const ChildRegistration child(pid);  // a stop signal kills it before removing its picture
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      // gnuplot names the script line at fault; its message is the log's last lines.
      std::ifstream log(log_path);
      std::string line, last;
      while (std::getline(log, line))
        if (!line.empty()) last = line;
      if (!shown_as.empty())
        for (size_t at; (at = last.find(script_path)) != std::string::npos;)
          last.replace(at, script_path.size(), shown_as);
      error = "gnuplot failed" + (last.empty() ? std::string() : ": " + last);
    }
  }
  std::error_code ignored;
  fs::remove(script_path, ignored);
  fs::remove(log_path, ignored);
  return error;
}

std::string gnuplot_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string gnuplot_terminal(const std::string& output, int width, int height) {
  const std::string size = std::to_string(width) + "," + std::to_string(height);
  if (fs::path(output).extension() == ".svg")
    return "set terminal svg size " + size + " dynamic background '#ffffff'\n";
  return "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size " + size +
         " } else { set terminal png size " + size + " }\n";
}

bool picture_is_complete(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  if (size <= 0) return false;
  // The last 64 bytes hold an SVG's closing tag (and what whitespace follows) and
  // a PNG's IEND chunk (length 0, type, CRC: always these 12 bytes).
  const std::streamoff tail_size = std::min<std::streamoff>(size, 64);
  std::string tail(static_cast<size_t>(tail_size), '\0');
  in.seekg(size - tail_size);
  in.read(tail.data(), tail_size);
  if (!in) return false;
  if (fs::path(path).extension() == ".svg") {
    tail.erase(tail.find_last_not_of(" \t\r\n") + 1);
    return tail.ends_with("</svg>");
  }
  static const std::string kIend("\0\0\0\0IEND\xAE\x42\x60\x82", 12);
  return tail.ends_with(kIend);
}

void publish_picture(const std::string& drawn, const std::string& output) {
  std::error_code ec;
  if (!picture_is_complete(drawn)) {
    fs::remove(drawn, ec);
    throw InputError("plot " + output +
                     ": gnuplot could not write it whole (disk full or a file size limit?)");
  }
  // fsynced before the rename, as every file shamn writes (core/atomic_file.h).
  const int fd = ::open(drawn.c_str(), O_RDONLY | O_CLOEXEC);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (synced) fs::rename(drawn, output, ec);
  std::error_code ignored;
  if (!synced || ec) fs::remove(drawn, ignored);
  SHAMN_INPUT_CHECK(synced && !ec, "cannot write '", output, "': ", synced ? ec.message() : "fsync failed");
}

void draw_with_gnuplot(const std::string& output,
                       const std::function<std::string(const std::string&)>& script) {
  const std::string gnuplot = find_gnuplot();
  SHAMN_INPUT_CHECK(!gnuplot.empty(), "gnuplot is not installed (apt-get install gnuplot-nox): no ", output);
  const fs::path out(output);
  SHAMN_INPUT_CHECK(out.extension() == ".png" || out.extension() == ".svg", "-o ", output,
                    ": the picture is a .png or an .svg file");
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  SHAMN_INPUT_CHECK(fs::is_directory(dir), output, ": the directory '", dir.string(), "' does not exist");
  check_replaceable(output);
  // The picture's private name keeps its extension: the scripts pick gnuplot's
  // terminal by it.
  remove_orphaned_temp_files(output, out.extension().string());
  const std::string tmp = temp_path_for(output, out.extension().string());
  const TempFileRegistration registration(tmp);
  const std::string body = script(tmp);
  const std::string error = run_gnuplot(gnuplot, body, output);
  std::error_code ec;
  if (!error.empty()) {
    fs::remove(tmp, ec);
    throw InputError("plot " + output + ": " + error);
  }
  SHAMN_INPUT_CHECK(fs::is_regular_file(tmp), "plot ", output, ": gnuplot wrote nothing");
  publish_picture(tmp, output);
}

}  // namespace shamn
