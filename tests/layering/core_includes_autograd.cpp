// Must not compile: core sits below autograd (tests/layering/CMakeLists.txt).
#include "autograd/variable.h"
