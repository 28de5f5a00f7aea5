// Events without the kernel: the default ring size policy.
#include <catch2/catch.hpp>

#include "ringcap/events.hpp"

using ringcap::default_ring_pages;

TEST_CASE("default ring size: perf's 128 pages, or up to 8 MiB per ring and 256 MiB in all with CAP_IPC_LOCK",
          "[events]") {
    CHECK(default_ring_pages(2, false) == 128);
    CHECK(default_ring_pages(512, false) == 128);
    if (ringcap::page_size() != 4096) return;  // the figures below are for 4 KiB pages
    CHECK(default_ring_pages(1, true) == 2048);
    CHECK(default_ring_pages(2, true) == 2048);
    CHECK(default_ring_pages(32, true) == 2048);   // 32 x 8 MiB = 256 MiB
    CHECK(default_ring_pages(33, true) == 1024);
    CHECK(default_ring_pages(64, true) == 1024);
    CHECK(default_ring_pages(256, true) == 256);
    CHECK(default_ring_pages(4096, true) == 128);  // never below perf's default
}
