# cmake -DSOURCE=DIR -DOUT=DIR -P InstalledDocs.cmake: README.md and docs/*.md as they are installed
# under /usr/share/doc/ringcap (OUT/README.md, OUT/docs/*.md). Their links to what the package does
# not ship there name what it does instead, as a Debian package's documentation should: a man page's
# source (docs/man/*.adoc) becomes the page's name, to read with man; LICENSE becomes copyright
# (the licence, in Debian's format). The source tree keeps its own links.
file(GLOB guides ${SOURCE}/docs/*.md)
foreach(md ${SOURCE}/README.md ${guides})
  file(RELATIVE_PATH rel ${SOURCE} ${md})
  file(READ ${md} text)
  string(REGEX REPLACE "\\[([^]]*)\\]\\((docs/)?man/[a-z0-9-]+\\.[1-8]\\.adoc\\)" "\\1" text "${text}")
  string(REPLACE "](LICENSE)" "](copyright)" text "${text}")
  file(WRITE ${OUT}/${rel} "${text}")
endforeach()
