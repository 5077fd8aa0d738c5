# deploy/ manifests, checked offline (tests/deploy/check.py: yamllint and
# PyYAML); skipped (77) with the reason when either is missing.
add_test(NAME deploy_manifests COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check.py
         ${CMAKE_SOURCE_DIR})
set_tests_properties(deploy_manifests PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60)
