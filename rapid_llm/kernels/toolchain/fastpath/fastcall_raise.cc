// How the C kernels of fastcall_torch.inc raise: torch's dispatcher turns a C++ exception into a Python error
// (RuntimeError), and C has no other way through it. Compiled as C++ and linked into the binding.
#include <stdexcept>

extern "C" [[noreturn]] void rl_raise(const char* message) { throw std::runtime_error(message); }
