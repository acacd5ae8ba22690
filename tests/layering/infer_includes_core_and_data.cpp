// Must compile: the control, so a failing probe fails for its include alone.
#include "core/tensor.h"
#include "data/token_file.h"
#include "infer/shq_file.h"
