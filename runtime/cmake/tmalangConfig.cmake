# find_package(tmalang CONFIG) with tmalang_DIR set to tmalang.get_cmake_dir() (the folder of this
# file, inside the installed tmalang package): defines tmalang_add_kernel (tmalang.cmake).
include("${CMAKE_CURRENT_LIST_DIR}/tmalang.cmake")
