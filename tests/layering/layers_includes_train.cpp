// Must not compile: layers sits below train.
#include "train/trainer.h"
