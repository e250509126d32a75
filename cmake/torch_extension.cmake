# torch.ops.lowbit: one shared library (python/csrc/torch_ops.cpp) that registers the operators
# when PyTorch loads it (torch.ops.load_library). It links the static lowbit and PyTorch's own
# libraries, found through the Python that will import it; no pybind11, no find_package(Torch)
# (whose CUDA probing needs more than lowbit does). The build tree holds a ready package in
# <build>/python/lowbit (PYTHONPATH=<build>/python), and `pip install .` installs one.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
# Where torch is, its C++ ABI, and the libstdc++ the interpreter runs with once torch is loaded.
set(_lowbit_torch_probe "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(next((l.split()[-1] for l in open('/proc/self/maps') if 'libstdc++' in l), '') if os.path.exists('/proc/self/maps') else '')")
# An isolated `pip install .` hides the environment's site-packages behind PYTHONPATH and
# PYTHONNOUSERSITE. The same interpreter in isolated mode (-I ignores both) sees the torch the
# package will run with, the one whose C++ ABI the operators must match. torch is deliberately not a
# build requirement: that would fetch another torch.
foreach(_lowbit_py_mode "-B" "-I")  # -B: a plain run (writes no bytecode)
  execute_process(COMMAND "${Python3_EXECUTABLE}" ${_lowbit_py_mode} -c "${_lowbit_torch_probe}"
                  OUTPUT_VARIABLE _lowbit_torch OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _lowbit_torch_rc ERROR_QUIET)
  if(_lowbit_torch_rc EQUAL 0)
    break()
  endif()
endforeach()
if(NOT _lowbit_torch_rc EQUAL 0)
  message(FATAL_ERROR "LOWBIT_BUILD_PYTHON: ${Python3_EXECUTABLE} cannot import torch. The operators are built "
                      "against the torch they run with: install torch first, then pip install .")
endif()
string(REPLACE "\n" ";" _lowbit_torch "${_lowbit_torch}")
list(GET _lowbit_torch 0 LOWBIT_TORCH_DIR)
list(GET _lowbit_torch 1 LOWBIT_TORCH_CXX11_ABI)
# The libstdc++ the interpreter runs with once torch is loaded. The module links that one,
# shared: a toolchain that links libstdc++ statically by default (the GPU machine's does) put a
# second copy of its locale and stream code in the module, and formatting a number into an error
# message (TORCH_CHECK with an int64) crashed the process.
set(LOWBIT_TORCH_LIBSTDCXX "")
list(LENGTH _lowbit_torch _lowbit_torch_n)
if(_lowbit_torch_n GREATER 2)
  list(GET _lowbit_torch 2 LOWBIT_TORCH_LIBSTDCXX)
endif()
message(STATUS "PyTorch for torch.ops.lowbit: ${LOWBIT_TORCH_DIR}")

add_library(lowbit_torch MODULE python/csrc/torch_ops.cpp)
target_include_directories(lowbit_torch SYSTEM PRIVATE ${LOWBIT_TORCH_DIR}/include
                                                       ${LOWBIT_TORCH_DIR}/include/torch/csrc/api/include)
target_compile_definitions(lowbit_torch PRIVATE _GLIBCXX_USE_CXX11_ABI=${LOWBIT_TORCH_CXX11_ABI})
target_compile_options(lowbit_torch PRIVATE ${LOWBIT_CXX_WARNINGS})
target_link_libraries(lowbit_torch PRIVATE ${LOWBIT_TORCH_LIBSTDCXX} lowbit ${LOWBIT_TORCH_DIR}/lib/libtorch.so
                                           ${LOWBIT_TORCH_DIR}/lib/libtorch_cpu.so ${LOWBIT_TORCH_DIR}/lib/libc10.so)
set_target_properties(lowbit_torch PROPERTIES
  PREFIX "" OUTPUT_NAME "_lowbit_ops"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/lowbit
  BUILD_RPATH "${LOWBIT_TORCH_DIR}/lib"
  INSTALL_RPATH "$ORIGIN/../torch/lib")

# The package's Python files beside the library in the build tree.
file(GLOB LOWBIT_PY_FILES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/lowbit/*.py)
foreach(f ${LOWBIT_PY_FILES})
  get_filename_component(name ${f} NAME)
  configure_file(${f} ${CMAKE_BINARY_DIR}/python/lowbit/${name} COPYONLY)
endforeach()

if(SKBUILD)
  install(TARGETS lowbit_torch LIBRARY DESTINATION lowbit)
endif()
