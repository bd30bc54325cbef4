// gift-fidelity: FP8 round-trip fidelity of Euclidean vs geometry-aware
// gradient transforms on real gradients (see --help and
// tools/fidelity/cli.h).
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "kernels/cpu_baseline.h"
#include "tools/fidelity/cli.h"

int main(int argc, char** argv) {
  if (absl::Status cpu = gift::kernels::CheckCpuBaseline(); !cpu.ok()) {
    std::cerr << "gift-fidelity: error: " << cpu.message() << "\n";
    return 2;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  // No module throws; this only turns an allocation failure on a huge input
  // into the tool's error contract instead of an abort.
  try {
    return gift::fidelity::RunFidelityCli(args, std::cout, std::cerr);
  } catch (const std::bad_alloc&) {
    std::cerr << "gift-fidelity: error: out of memory\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gift-fidelity: error: " << e.what() << "\n";
    return 2;
  }
}
