# What `cmake --install` puts beside the binary, and the Debian package CPack makes of it
# (scripts/package builds it: Release, -DCMAKE_INSTALL_PREFIX=/usr, `cpack -G DEB`).
#
# Every destination is relative to the prefix, so `cmake --install --prefix DIR` stays inside DIR:
#   bin/ringcap
#   share/man/man1/ringcap.1.gz, ringcap-record.1.gz  (built from docs/man/*.adoc by asciidoctor)
#   share/bash-completion/completions/ringcap  (where bash-completion loads it from, on first use)
#   share/doc/ringcap/README.md, docs/*.md (their links to what is not installed beside them point
#       to what is), copyright (LICENSE in Debian's machine-readable format), changelog.gz
#   lib/systemd/system/ringcap-capture.{service,timer}  (with prefix /usr: /usr/lib/systemd/system,
#       which systemd reads; nothing enables them: the package has no maintainer scripts)
#   share/ringcap/k8s/*.yaml, share/ringcap/slurm/{prolog,epilog}.sh  (recipes to copy and adapt)
# Generated files are made by the target ringcap_docs (part of `all`; scripts/package builds it).

# The Maintainer field and the changelog's contact; a distributor sets its own with
# -DRINGCAP_MAINTAINER="Name <mail>".
set(RINGCAP_MAINTAINER "ringcap developers <ringcap@example.org>" CACHE STRING "Maintainer of the .deb")
if(RINGCAP_MAINTAINER STREQUAL "ringcap developers")  # the earlier default, without an address
  set(RINGCAP_MAINTAINER "ringcap developers <ringcap@example.org>" CACHE STRING "Maintainer of the .deb" FORCE)
endif()

# Man pages: asciidoctor's manpage backend, then gzip -9n as Debian wants them.
option(RINGCAP_MANPAGES "Build and install the man pages (needs asciidoctor)" ON)
set(RINGCAP_MAN_DIR ${PROJECT_BINARY_DIR}/man)
set(_generated)
if(RINGCAP_MANPAGES)
  find_program(ASCIIDOCTOR asciidoctor)
  if(NOT ASCIIDOCTOR)
    message(FATAL_ERROR "asciidoctor builds the man pages: apt-get install asciidoctor (scripts/bootstrap "
                        "does), or configure with -DRINGCAP_MANPAGES=OFF")
  endif()
  foreach(page ringcap.1 ringcap-record.1)
    add_custom_command(OUTPUT ${RINGCAP_MAN_DIR}/${page}.gz
      COMMAND ${ASCIIDOCTOR} -b manpage -a ringcap-version=${PROJECT_VERSION} -D ${RINGCAP_MAN_DIR}
              ${PROJECT_SOURCE_DIR}/docs/man/${page}.adoc
      COMMAND gzip -9nf ${RINGCAP_MAN_DIR}/${page}
      DEPENDS ${PROJECT_SOURCE_DIR}/docs/man/${page}.adoc
      COMMENT "Man page ${page}" VERBATIM)
    list(APPEND _generated ${RINGCAP_MAN_DIR}/${page}.gz)
    install(FILES ${RINGCAP_MAN_DIR}/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  endforeach()
endif()

# The Debian changelog (packaging/changelog; a native package's is changelog.gz), gzip -9n.
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/changelog.gz
  COMMAND ${CMAKE_COMMAND} -E copy ${PROJECT_SOURCE_DIR}/packaging/changelog ${PROJECT_BINARY_DIR}/changelog
  COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/changelog
  DEPENDS ${PROJECT_SOURCE_DIR}/packaging/changelog VERBATIM)
list(APPEND _generated ${PROJECT_BINARY_DIR}/changelog.gz)

# The copyright file in Debian's machine-readable format, made from LICENSE (the MIT licence, which
# Debian calls Expat) whenever LICENSE changes: its notice's holder, and its terms indented, with
# " ." for blank lines.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/LICENSE)
file(READ ${PROJECT_SOURCE_DIR}/LICENSE _license)
if(NOT _license MATCHES "Copyright \\(c\\) ([^\n]+)\n\n(.*[^\n])\n*$")
  message(FATAL_ERROR "LICENSE: expected a 'Copyright (c) YEAR HOLDER' line followed by the terms")
endif()
set(RINGCAP_COPYRIGHT "${CMAKE_MATCH_1}")
string(REPLACE "\n\n" "\n.\n" _terms "${CMAKE_MATCH_2}")
string(REPLACE "\n" "\n " RINGCAP_LICENSE_TERMS " ${_terms}")
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/copyright CONTENT
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ringcap

Files: *
Copyright: @RINGCAP_COPYRIGHT@
License: Expat

License: Expat
@RINGCAP_LICENSE_TERMS@
" @ONLY)

# The README and the guides as installed: their links to the man pages' sources and to LICENSE,
# which are not installed beside them, name the man pages and copyright (cmake/InstalledDocs.cmake).
file(GLOB _guides CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
set(_installed_docs ${PROJECT_BINARY_DIR}/doc/README.md)
foreach(md ${_guides})
  get_filename_component(_name ${md} NAME)
  list(APPEND _installed_docs ${PROJECT_BINARY_DIR}/doc/docs/${_name})
endforeach()
add_custom_command(OUTPUT ${_installed_docs}
  COMMAND ${CMAKE_COMMAND} -DSOURCE=${PROJECT_SOURCE_DIR} -DOUT=${PROJECT_BINARY_DIR}/doc
          -P ${PROJECT_SOURCE_DIR}/cmake/InstalledDocs.cmake
  DEPENDS ${PROJECT_SOURCE_DIR}/README.md ${_guides} ${PROJECT_SOURCE_DIR}/cmake/InstalledDocs.cmake
  COMMENT "README and guides as installed" VERBATIM)
list(APPEND _generated ${_installed_docs})
list(REMOVE_AT _installed_docs 0)  # the guides, under docs/
install(FILES ${PROJECT_BINARY_DIR}/doc/README.md ${PROJECT_BINARY_DIR}/copyright ${PROJECT_BINARY_DIR}/changelog.gz
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${_installed_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
add_custom_target(ringcap_docs ALL DEPENDS ${_generated})
install(FILES completion/ringcap.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME ringcap)
install(FILES deploy/systemd/ringcap-capture.service deploy/systemd/ringcap-capture.timer
        DESTINATION lib/systemd/system)
install(FILES deploy/k8s/daemonset.yaml deploy/k8s/job.yaml deploy/k8s/Dockerfile
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ringcap/k8s)
install(PROGRAMS deploy/slurm/prolog.sh deploy/slurm/epilog.sh
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ringcap/slurm)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ringcap)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${RINGCAP_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "perf_event collector writing perf.data files (io_uring)")
# Lines under 80 columns (lintian: extended-description-line-too-long).
set(CPACK_PACKAGE_DESCRIPTION
    "ringcap records Linux perf_event samples with io_uring and writes perf.data\n\
files that perf report, perf script and hotspot read. It is meant for\n\
high-frequency, system-wide captures on machines with many CPUs, and counts\n\
every sample it cannot keep. Ships systemd units (not enabled), a Kubernetes\n\
DaemonSet and Job, and Slurm prolog/epilog scripts under /usr/share/ringcap.")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # ringcap_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends from the binary's shared libraries (dpkg-shlibdeps, from dpkg-dev): liburing2,
# libmimalloc2.0, libzstd1, libstdc++6, libgcc-s1, libc6 with their minimum versions.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# perf reads what ringcap writes; a collector host may ship the files elsewhere, so not Depends.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS linux-perf)
include(CPack)
