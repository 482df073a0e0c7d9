# Installation and the Debian package.
#   cmake --install build [--prefix DIR]     programs, libgravac, gravac.h, gravac.pc, the Python
#                                            package, the CUDA plugins when built, the examples
#   (cd build && cpack -G DEB)               gravac_<version>_<arch>.deb with the same files
# Layout under the prefix: bin/gravac-{server,worker,launch,bench}; <libdir>/libgravac.so.*;
# <libdir>/gravac/libgravac_*_cuda.so (the programs look there: ../lib/gravac from bin/);
# include/gravac.h; <libdir>/pkgconfig/gravac.pc; lib/python3/dist-packages/gravac (Debian's
# python3 path; GV_PYTHON_DIR to change it); share/doc/gravac/examples.
set(GV_PYTHON_DIR "lib/python3/dist-packages" CACHE STRING
    "where the Python package goes, relative to the prefix")

install(TARGETS gravac-server gravac-worker gravac-launch gravac-bench
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(plugin gravac_nn_cuda gravac_compress_cuda)
  if(TARGET ${plugin})
    # ../lib/gravac relative to bin/ is where the programs look for their plugins
    install(TARGETS ${plugin} LIBRARY DESTINATION lib/gravac)
  endif()
endforeach()
install(TARGETS gravac
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/lib/pkgconfig/gravac.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python package; _install.py tells it where the library is relative to itself.
configure_file(${PROJECT_SOURCE_DIR}/python/_install.py.in ${PROJECT_BINARY_DIR}/python/_install.py
               @ONLY)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/gravac DESTINATION ${GV_PYTHON_DIR}
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/python/_install.py DESTINATION ${GV_PYTHON_DIR}/gravac)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
        FILES_MATCHING PATTERN "*.py" PATTERN "*.md" PATTERN "__pycache__" EXCLUDE)

set(CPACK_PACKAGE_NAME gravac)
set(CPACK_PACKAGE_VENDOR "the gravac developers")
set(CPACK_PACKAGE_CONTACT "gravac developers <gravac@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "parameter server with adaptive gradient compression (GraVAC), with a PyTorch binding")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "python3-torch, python3-torchvision, dataset-fashion-mnist, fortunes")
set(CPACK_GENERATOR DEB)
include(CPack)
