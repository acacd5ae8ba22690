// Must not compile: the runtime does not depend on the training layers.
#include "layers/shamn_model.h"
