from lab.extensions.hf.data_options import *  # noqa
